package policy

import (
	"encoding/json"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The tool and the server of a decision are usually the very same values on
// every call of that tool (the gateway hands policy the definitions of its
// catalog), and their canonical encoding is most of an event's: a schema
// goes through the generic encoder, a server's confinement is 17 members.
// The log remembers the encoding of each tool and server by name, with a
// snapshot of what it encoded, and reuses it only when the value to log is
// equal to that snapshot in every field the encoding depends on. Equality
// is checked on content, not identity, so a definition changed in place (a
// schema map edited, a slice element replaced) is never logged stale; what
// makes the check cheap is that Go strings are immutable, so two strings
// that share their bytes compare equal without reading them, and so are the
// scalars held in an interface, so a schema's leaf that is the very value
// remembered is equal without being read. The check runs right after an
// evaluation has evicted the caches, so what costs is the number of
// distinct cache lines it reads one after the other: the remembered side
// is one flat array, and the entry of the last tool and server logged is
// found without a lookup.

// memoMaxEntries bounds each of the memos; when full it is cleared (a
// catalog refills it in one list).
const memoMaxEntries = 4096

// definitionMemo holds the canonical encodings of the tools and servers a
// log has written. It is safe for concurrent use; its entries are never
// changed once stored.
type definitionMemo struct {
	tools, servers   sync.Map // name → *toolMemo, *serverMemo
	nTools, nServers atomic.Int64
	// lastTool and lastServer are the entries used last, tried before the
	// maps.
	lastTool   atomic.Pointer[toolMemo]
	lastServer atomic.Pointer[serverMemo]
}

type toolMemo struct {
	tool Tool // its strings; schema and annotations are snapshots
	// snapshots holds the schema's snapshot, then the annotations'.
	snapshots jsonSnapshot
	json      []byte
}

type serverMemo struct {
	server Server // Args and Confinement.Missing copied
	json   []byte
}

// appendTool appends t's canonical encoding, remembered or encoded.
func (m *definitionMemo) appendTool(b []byte, t *Tool) ([]byte, error) {
	tm := m.lastTool.Load()
	if tm == nil || tm.tool.Name != t.Name {
		tm = nil
		if v, ok := m.tools.Load(t.Name); ok {
			tm = v.(*toolMemo)
			m.lastTool.Store(tm)
		}
	}
	if tm != nil && tm.matches(t) {
		return append(b, tm.json...), nil
	}
	start := len(b)
	b, err := appendTool(b, t)
	if err != nil {
		return nil, err
	}
	tm = &toolMemo{tool: *t}
	tm.tool.InputSchema, tm.tool.Annotations = nil, nil // compared through their snapshots
	if tm.snapshots.add(t.InputSchema, 0) && tm.snapshots.add(t.Annotations, 0) {
		tm.json = slices.Clone(b[start:])
		storeMemo(&m.tools, &m.nTools, t.Name, tm)
		m.lastTool.Store(tm)
	}
	return b, nil
}

// appendServer appends s's canonical encoding, remembered or encoded.
func (m *definitionMemo) appendServer(b []byte, s *Server) []byte {
	sm := m.lastServer.Load()
	if sm == nil || sm.server.Name != s.Name {
		sm = nil
		if v, ok := m.servers.Load(s.Name); ok {
			sm = v.(*serverMemo)
			m.lastServer.Store(sm)
		}
	}
	if sm != nil && sameServer(&sm.server, s) {
		return append(b, sm.json...)
	}
	start := len(b)
	b = appendServer(b, s)
	sm = &serverMemo{server: *s, json: slices.Clone(b[start:])}
	sm.server.Args = slices.Clone(s.Args)
	sm.server.Confinement.Missing = slices.Clone(s.Confinement.Missing)
	storeMemo(&m.servers, &m.nServers, s.Name, sm)
	m.lastServer.Store(sm)
	return b
}

// storeMemo adds v under key, clearing m first when it holds memoMaxEntries.
func storeMemo(m *sync.Map, n *atomic.Int64, key string, v any) {
	if n.Add(1) > memoMaxEntries {
		m.Clear()
		n.Store(1)
	}
	m.Store(key, v)
}

// matches reports whether t encodes as tm.tool did: every string equal,
// and the schema and annotations equal to their snapshots.
func (tm *toolMemo) matches(t *Tool) bool {
	r := &tm.tool
	if r.Name != t.Name || r.UpstreamName != t.UpstreamName || r.Description != t.Description || r.SHA256 != t.SHA256 {
		return false
	}
	at := 0
	return tm.snapshots.matches(t.InputSchema, &at) && tm.snapshots.matches(t.Annotations, &at) && at == len(tm.snapshots)
}

// sameServer reports whether a and b are equal in every field (and so
// encode alike).
func sameServer(a, b *Server) bool {
	return a.Name == b.Name && a.Command == b.Command && a.URL == b.URL && slices.Equal(a.Args, b.Args) &&
		sameConfinement(&a.Confinement, &b.Confinement) && slices.Equal(a.Confinement.Missing, b.Confinement.Missing)
}

// jsonSnapshot is the content of values made of the types decoded JSON is
// made of (map[string]any, []any, string, json.Number, float64, bool, nil,
// plus int and int64), sharing their strings, as one array of nodes in
// depth-first order: a map's node, then each key's node followed by its
// value's nodes; an array's node, then its elements'; a scalar's node.
type jsonSnapshot []snapshotNode

type snapshotNode struct {
	kind byte   // 0: the scalar in leaf; 'm': a map; 'a': an array
	n    int    // a map's keys, an array's elements
	key  string // in a map, the key this node's value is under
	leaf any
}

// add appends v's snapshot; false when v holds another type, a nil map or
// slice, or is nested more than 64 levels deep (never remembered).
func (s *jsonSnapshot) add(v any, depth int) bool {
	return s.addUnder("", v, depth)
}

func (s *jsonSnapshot) addUnder(key string, v any, depth int) bool {
	if depth > 64 {
		return false
	}
	switch x := v.(type) {
	case nil, string, json.Number, bool, float64, int, int64:
		*s = append(*s, snapshotNode{key: key, leaf: v})
		return true
	case map[string]any:
		if x == nil {
			return false
		}
		*s = append(*s, snapshotNode{kind: 'm', n: len(x), key: key})
		for k, e := range x {
			if !s.addUnder(k, e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		if x == nil {
			return false
		}
		*s = append(*s, snapshotNode{kind: 'a', n: len(x), key: key})
		for _, e := range x {
			if !s.addUnder("", e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// matches reports whether v has the content of the snapshot's value at
// *at (the same types, the same keys, equal strings and bit-identical
// numbers, since 0 and -0 encode differently), and moves *at past it.
func (s jsonSnapshot) matches(v any, at *int) bool {
	if *at >= len(s) {
		return false
	}
	node := &s[*at]
	*at++
	switch node.kind {
	case 'm':
		m, ok := v.(map[string]any)
		if !ok || m == nil || len(m) != node.n {
			return false
		}
		for range node.n {
			e, ok := m[s[*at].key]
			if !ok || !s.matches(e, at) {
				return false
			}
		}
		return true
	case 'a':
		a, ok := v.([]any)
		if !ok || a == nil || len(a) != node.n {
			return false
		}
		for i := range a {
			if !s.matches(a[i], at) {
				return false
			}
		}
		return true
	}
	return sameScalar(node.leaf, v)
}

// sameScalar reports whether v is the scalar leaf: the very value (the
// same type and the same boxed value, which an interface never lets change,
// so it is not read), or one of the same type and content.
func sameScalar(leaf, v any) bool {
	type eface struct{ typ, data unsafe.Pointer }
	if *(*eface)(unsafe.Pointer(&leaf)) == *(*eface)(unsafe.Pointer(&v)) {
		return true
	}
	switch x := v.(type) {
	case nil:
		return leaf == nil
	case string:
		y, ok := leaf.(string)
		return ok && x == y
	case json.Number:
		y, ok := leaf.(json.Number)
		return ok && x == y
	case bool:
		y, ok := leaf.(bool)
		return ok && x == y
	case float64:
		y, ok := leaf.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case int:
		y, ok := leaf.(int)
		return ok && x == y
	case int64:
		y, ok := leaf.(int64)
		return ok && x == y
	}
	return false
}
