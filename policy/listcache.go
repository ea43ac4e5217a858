package policy

import (
	"bytes"
	"encoding/json"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
	"reflect"
	"slices"
	"sync"
	"unsafe"
)

// VolatileInputFields are the input fields that differ from one request to
// the next without changing what is asked. A list decision is cached only
// for a policy that reads none of them (see rego.Policy.Volatile).
var VolatileInputFields = []string{"time", "request_id", "session_id"}

// listCacheMaxEntries bounds the exposure cache; when full it is cleared
// (cheaper than LRU bookkeeping, and a list refills it in one call).
const listCacheMaxEntries = 100_000

// cacheableEngine is implemented by the engines of this package that know
// whether their policy reads a volatile input field or calls a
// non-deterministic builtin; other engines are never cached.
type cacheableEngine interface {
	cacheable() bool
}

// listCache holds the exposure decisions of list actions (tools/list,
// resources/list, prompts/list), keyed by everything in the input but the
// volatile fields. One cache belongs to one Decider, i.e. to one policy
// revision and one data document: a new policy or new data makes a new
// Decider and so an empty cache. A tool whose definition changes has a new
// sha256, and so a new key.
type listCache struct {
	mu      sync.RWMutex
	entries int
	// byContext maps the JSON of the input without item and volatile
	// fields (action, principal, server) to the decisions of its items.
	byContext map[string]map[itemKey]Decision
	// lists holds, by the context of its first item, the last list logged
	// in full, so that a repeat of it is recognised in one pass.
	lists map[string]*listMemo
}

// listMemoMaxEntries bounds the remembered lists (one per principal and
// first server); when full they are forgotten.
const listMemoMaxEntries = 4096

// listMemo is a list whose event was written in full: its items' keys,
// their decisions, and where the event went. It is never changed.
type listMemo struct {
	keys       []listKey
	decisions  []Decision
	decisionID string
	written    auditlog.Appended
	hash       string // written.Hash(), made once for every repeat to name
}

// itemKey identifies the listed item. A tool's input schema and annotations
// are identified by its sha256 (the hash of the upstream definition); a
// tool without one is never cached.
type itemKey struct {
	kind                          byte
	name, upstream, sha256, descr string
	uri, mimeType                 string
	template                      bool
}

func newListCache() *listCache {
	return &listCache{byContext: map[string]map[itemKey]Decision{}, lists: map[string]*listMemo{}}
}

// listKey is where one input's decision lives; ok is false for an input
// that is not cached.
type listKey struct {
	context string
	item    itemKey
	ok      bool
}

// keys computes the key of every input. Inputs of one list share their
// principal and server values, so the context's JSON is computed once per
// distinct context, recognised without encoding it again.
func (c *listCache) keys(inputs []Input) []listKey {
	keys := make([]listKey, len(inputs))
	var prev *Input
	var prevContext string
	for i := range inputs {
		in := &inputs[i]
		item, ok := itemKeyOf(in)
		if !ok {
			continue
		}
		if prev == nil || !sameContext(prev, in) {
			ctx, ok := contextKey(in)
			if !ok {
				continue
			}
			prev, prevContext = in, ctx
		}
		keys[i] = listKey{context: prevContext, item: item, ok: true}
	}
	return keys
}

// contextKey is the JSON of in without its item and volatile fields.
func contextKey(in *Input) (string, bool) {
	ctx := *in
	ctx.Tool, ctx.Resource, ctx.Prompt, ctx.Arguments = nil, nil, nil, nil
	ctx.Time, ctx.RequestID, ctx.SessionID = "", "", ""
	b, err := json.Marshal(ctx)
	return string(b), err == nil
}

func itemKeyOf(in *Input) (itemKey, bool) {
	if in.Arguments != nil {
		return itemKey{}, false
	}
	switch {
	case in.Tool != nil:
		if in.Resource != nil || in.Prompt != nil || in.Tool.SHA256 == "" {
			return itemKey{}, false
		}
		t := in.Tool
		return itemKey{kind: 't', name: t.Name, upstream: t.UpstreamName, sha256: t.SHA256, descr: t.Description}, true
	case in.Resource != nil:
		if in.Prompt != nil {
			return itemKey{}, false
		}
		r := in.Resource
		return itemKey{kind: 'r', name: r.Name, uri: r.URI, mimeType: r.MIMEType, template: r.Template}, true
	case in.Prompt != nil:
		p := in.Prompt
		return itemKey{kind: 'p', name: p.Name, upstream: p.UpstreamName, descr: p.Description}, true
	}
	return itemKey{}, false
}

// sameContext reports whether a and b have the same action, principal and
// server, comparing maps and slices by identity: equal identity implies
// equal content, unequal identity just costs an encoding.
func sameContext(a, b *Input) bool {
	if a.Action == b.Action && sameMemory(&a.Principal, &b.Principal) && sameMemory(&a.Server, &b.Server) {
		return true // the usual case: one principal and server copied into every input
	}
	pa, pb := a.Principal, b.Principal
	if a.Action != b.Action || pa.ID != pb.ID || pa.AuthMethod != pb.AuthMethod || pa.Transport != pb.Transport ||
		!sameMap(pa.Claims, pb.Claims) {
		return false
	}
	sa, sb := a.Server, b.Server
	if sa.Name != sb.Name || sa.Command != sb.Command || sa.URL != sb.URL || !sameSlice(sa.Args, sb.Args) ||
		!sameSlice(sa.Confinement.Missing, sb.Confinement.Missing) {
		return false
	}
	return sameConfinement(&sa.Confinement, &sb.Confinement)
}

// sameConfinement reports whether a and b are equal in every field but
// Missing, which callers compare as they need.
func sameConfinement(ca, cb *Confinement) bool {
	return ca.ProcessGroup == cb.ProcessGroup && ca.PIDNamespace == cb.PIDNamespace &&
		ca.ParentDeathSignal == cb.ParentDeathSignal && ca.EnvironmentInherited == cb.EnvironmentInherited &&
		ca.Level == cb.Level && ca.UserNamespace == cb.UserNamespace && ca.MountNamespace == cb.MountNamespace &&
		ca.NetworkNamespace == cb.NetworkNamespace && ca.IPCNamespace == cb.IPCNamespace &&
		ca.UTSNamespace == cb.UTSNamespace && ca.Landlock == cb.Landlock && ca.Seccomp == cb.Seccomp &&
		ca.NoNewPrivs == cb.NoNewPrivs && ca.CapabilitiesDropped == cb.CapabilitiesDropped &&
		ca.Cgroup == cb.Cgroup && ca.Network == cb.Network
}

func sameMap[K comparable, V any](a, b map[K]V) bool {
	return (a == nil) == (b == nil) && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (a == nil) == (b == nil) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// lookup fills decisions[i] and hit[i] for every cached key; it returns
// the number of hits.
func (c *listCache) lookup(keys []listKey, decisions []Decision, hit []bool) int {
	n := 0
	c.mu.RLock()
	defer c.mu.RUnlock()
	var lastContext string
	var items map[itemKey]Decision
	for i, k := range keys {
		if !k.ok {
			continue
		}
		if items == nil || k.context != lastContext {
			items, lastContext = c.byContext[k.context], k.context
			if items == nil {
				continue
			}
		}
		if d, ok := items[k.item]; ok {
			decisions[i], hit[i] = d, true
			n++
		}
	}
	return n
}

// store keeps the decisions evaluated without error.
func (c *listCache) store(keys []listKey, decisions []Decision, errs []error, hit []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		if !k.ok || hit[i] || errs[i] != nil {
			continue
		}
		if c.entries >= listCacheMaxEntries {
			clear(c.byContext)
			c.entries = 0
		}
		items := c.byContext[k.context]
		if items == nil {
			items = map[itemKey]Decision{}
			c.byContext[k.context] = items
		}
		if _, ok := items[k.item]; !ok {
			c.entries++
		}
		items[k.item] = decisions[i]
	}
}

// remember records a list just logged in full, whose every item has a key
// and a decision evaluated without error.
func (c *listCache) remember(keys []listKey, decisions []Decision, decisionID string, written auditlog.Appended) {
	if len(keys) == 0 {
		return
	}
	for _, k := range keys {
		if !k.ok {
			return
		}
	}
	m := &listMemo{keys: keys, decisions: slices.Clone(decisions), decisionID: decisionID, written: written, hash: written.Hash()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lists) >= listMemoMaxEntries {
		clear(c.lists)
	}
	c.lists[keys[0].context] = m
}

// forget drops m, whose file the log has left.
func (c *listCache) forget(m *listMemo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists[m.keys[0].context] == m {
		delete(c.lists, m.keys[0].context)
	}
}

// repeatOf returns the remembered list that inputs repeat exactly, or
// nil. It compares each input with the remembered keys without building
// keys of its own: a context is encoded only where it changes from one
// input to the next (consecutive items of one server share it).
func (c *listCache) repeatOf(inputs []Input) *listMemo {
	if len(inputs) == 0 {
		return nil
	}
	first, ok := contextKey(&inputs[0])
	if !ok {
		return nil
	}
	c.mu.RLock()
	m := c.lists[first]
	c.mu.RUnlock()
	if m == nil || len(m.keys) != len(inputs) {
		return nil
	}
	for i := range inputs {
		in, mk := &inputs[i], &m.keys[i]
		if item, ok := itemKeyOf(in); !ok || item != mk.item {
			return nil
		}
		if i == 0 || sameContext(&inputs[i-1], in) && sameString(mk.context, m.keys[i-1].context) {
			continue // the first context found m; others compared equal at i-1
		}
		if ctx, ok := contextKey(in); !ok || ctx != mk.context {
			return nil
		}
	}
	return m
}

// sameMemory reports whether *a and *b hold the same bytes: the same
// string, map and slice headers, so equal contents, in the sense of
// sameContext.
func sameMemory[T any](a, b *T) bool {
	n := unsafe.Sizeof(*a)
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(a)), n), unsafe.Slice((*byte)(unsafe.Pointer(b)), n))
}

// sameString reports whether a and b are the same string in memory.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}
