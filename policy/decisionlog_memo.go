package policy

import (
	"encoding/json"
	"math"
	"slices"
	"sync"
	"sync/atomic"
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
// that share their bytes compare equal without reading them.

// memoMaxEntries bounds each of the memos; when full it is cleared (a
// catalog refills it in one list).
const memoMaxEntries = 4096

// definitionMemo holds the canonical encodings of the tools and servers a
// log has written. It is safe for concurrent use; its entries are never
// changed once stored.
type definitionMemo struct {
	tools, servers   sync.Map // name → *toolMemo, *serverMemo
	nTools, nServers atomic.Int64
}

type toolMemo struct {
	tool                Tool // its strings; schema and annotations are snapshots
	schema, annotations jsonSnapshot
	json                []byte
}

type serverMemo struct {
	server Server // Args and Confinement.Missing copied
	json   []byte
}

// appendTool appends t's canonical encoding, remembered or encoded.
func (m *definitionMemo) appendTool(b []byte, t *Tool) ([]byte, error) {
	if v, ok := m.tools.Load(t.Name); ok {
		if tm := v.(*toolMemo); tm.matches(t) {
			return append(b, tm.json...), nil
		}
	}
	start := len(b)
	b, err := appendTool(b, t)
	if err != nil {
		return nil, err
	}
	tm := &toolMemo{tool: *t}
	tm.tool.InputSchema, tm.tool.Annotations = nil, nil // compared through their snapshots
	var ok1, ok2 bool
	if tm.schema, ok1 = snapshotOf(t.InputSchema, 0); ok1 {
		tm.annotations, ok2 = snapshotOf(t.Annotations, 0)
	}
	if ok1 && ok2 {
		tm.json = slices.Clone(b[start:])
		storeMemo(&m.tools, &m.nTools, t.Name, tm)
	}
	return b, nil
}

// appendServer appends s's canonical encoding, remembered or encoded.
func (m *definitionMemo) appendServer(b []byte, s *Server) []byte {
	if v, ok := m.servers.Load(s.Name); ok {
		if sm := v.(*serverMemo); sameServer(&sm.server, s) {
			return append(b, sm.json...)
		}
	}
	start := len(b)
	b = appendServer(b, s)
	sm := &serverMemo{server: *s, json: slices.Clone(b[start:])}
	sm.server.Args = slices.Clone(s.Args)
	sm.server.Confinement.Missing = slices.Clone(s.Confinement.Missing)
	storeMemo(&m.servers, &m.nServers, s.Name, sm)
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
	return r.Name == t.Name && r.UpstreamName == t.UpstreamName && r.Description == t.Description &&
		r.SHA256 == t.SHA256 && tm.schema.matches(t.InputSchema) && tm.annotations.matches(t.Annotations)
}

// sameServer reports whether a and b are equal in every field (and so
// encode alike).
func sameServer(a, b *Server) bool {
	return a.Name == b.Name && a.Command == b.Command && a.URL == b.URL && slices.Equal(a.Args, b.Args) &&
		sameConfinement(&a.Confinement, &b.Confinement) && slices.Equal(a.Confinement.Missing, b.Confinement.Missing)
}

// jsonSnapshot is the content of a value made of the types decoded JSON is
// made of (map[string]any, []any, string, json.Number, float64, bool, nil,
// plus int and int64), sharing its strings: a map's keys with the
// snapshots of their values, an array's elements, or a scalar.
type jsonSnapshot struct {
	kind   byte // 0: the scalar in leaf; 'm': a map; 'a': an array
	leaf   any
	keys   []string
	values []jsonSnapshot
}

// snapshotOf takes v's snapshot; false when v holds another type, a nil
// map or slice, or is nested more than 64 levels deep (never remembered).
func snapshotOf(v any, depth int) (jsonSnapshot, bool) {
	if depth > 64 {
		return jsonSnapshot{}, false
	}
	switch x := v.(type) {
	case nil, string, json.Number, bool, float64, int, int64:
		return jsonSnapshot{leaf: v}, true
	case map[string]any:
		if x == nil {
			return jsonSnapshot{}, false
		}
		s := jsonSnapshot{kind: 'm', keys: make([]string, 0, len(x)), values: make([]jsonSnapshot, 0, len(x))}
		for k, e := range x {
			es, ok := snapshotOf(e, depth+1)
			if !ok {
				return jsonSnapshot{}, false
			}
			s.keys, s.values = append(s.keys, k), append(s.values, es)
		}
		return s, true
	case []any:
		if x == nil {
			return jsonSnapshot{}, false
		}
		s := jsonSnapshot{kind: 'a', values: make([]jsonSnapshot, len(x))}
		for i, e := range x {
			var ok bool
			if s.values[i], ok = snapshotOf(e, depth+1); !ok {
				return jsonSnapshot{}, false
			}
		}
		return s, true
	}
	return jsonSnapshot{}, false
}

// matches reports whether v has the snapshot's content: the same types,
// the same keys, equal strings and bit-identical numbers (0 and -0 encode
// differently).
func (s *jsonSnapshot) matches(v any) bool {
	switch s.kind {
	case 'm':
		m, ok := v.(map[string]any)
		if !ok || m == nil || len(m) != len(s.keys) {
			return false
		}
		for i, k := range s.keys {
			e, ok := m[k]
			if !ok || !s.values[i].matches(e) {
				return false
			}
		}
		return true
	case 'a':
		a, ok := v.([]any)
		if !ok || a == nil || len(a) != len(s.values) {
			return false
		}
		for i := range a {
			if !s.values[i].matches(a[i]) {
				return false
			}
		}
		return true
	}
	switch x := v.(type) {
	case nil:
		return s.leaf == nil
	case string:
		y, ok := s.leaf.(string)
		return ok && x == y
	case json.Number:
		y, ok := s.leaf.(json.Number)
		return ok && x == y
	case bool:
		y, ok := s.leaf.(bool)
		return ok && x == y
	case float64:
		y, ok := s.leaf.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case int:
		y, ok := s.leaf.(int)
		return ok && x == y
	case int64:
		y, ok := s.leaf.(int64)
		return ok && x == y
	}
	return false
}
