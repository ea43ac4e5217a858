package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// listChangeRouting sends a list_changed notification only to the
// downstream sessions whose principal's list changed: telling a client
// that its list changed when the change is to a tool it may not see would
// tell it that something it may not see exists and moved.
//
// The SDK sends list_changed to every session of a server when its
// registry changes; a sending middleware lets through only the
// notifications owed to a session, which upstreamChanged decides by policy
// before the SDK sends them.
type listChangeRouting struct {
	mu         sync.Mutex
	principals map[*mcp.ServerSession]policy.Principal // recorded at initialize and subscriptions/listen
	owed       map[*mcp.ServerSession]map[string]bool  // session → list_changed methods it is owed
	pruneAt    int                                     // prune principals when it has this many
}

// listChangedMethods are the notifications listChangeRouting routes.
var listChangedMethods = map[string]bool{
	"notifications/tools/list_changed":     true,
	"notifications/resources/list_changed": true,
	"notifications/prompts/list_changed":   true,
}

// record remembers the principal of a session, from the request that
// opens it: a legacy session's initialize (the SDK binds the session to
// the credentials it was opened with) or a 2026-07-28 subscriptions/listen.
// live lists the sessions still open, to forget the others now and then.
func (r *listChangeRouting) record(ss *mcp.ServerSession, p policy.Principal, live func() map[*mcp.ServerSession]bool) {
	if ss == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.principals == nil {
		r.principals = map[*mcp.ServerSession]policy.Principal{}
	}
	r.principals[ss] = p
	if len(r.principals) >= max(r.pruneAt, 64) {
		alive := live()
		for s := range r.principals {
			if !alive[s] && s != ss {
				delete(r.principals, s)
				delete(r.owed, s)
			}
		}
		r.pruneAt = 2 * len(r.principals)
	}
}

// forget drops a session whose subscriptions/listen ended.
func (r *listChangeRouting) forget(ss *mcp.ServerSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.principals, ss)
	delete(r.owed, ss)
}

// sessionsByPrincipal groups the recorded sessions still open by principal.
func (r *listChangeRouting) sessionsByPrincipal(live map[*mcp.ServerSession]bool) map[string][]*mcp.ServerSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]*mcp.ServerSession{}
	for ss, p := range r.principals {
		if live[ss] {
			out[principalIdentity(p)] = append(out[principalIdentity(p)], ss)
		}
	}
	return out
}

func (r *listChangeRouting) principalOf(ss *mcp.ServerSession) policy.Principal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.principals[ss]
}

// owe marks sessions as owed the notification method.
func (r *listChangeRouting) owe(sessions []*mcp.ServerSession, method string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owed == nil {
		r.owed = map[*mcp.ServerSession]map[string]bool{}
	}
	for _, ss := range sessions {
		if r.owed[ss] == nil {
			r.owed[ss] = map[string]bool{}
		}
		r.owed[ss][method] = true
	}
}

// filter is the sending middleware: a list_changed notification goes out
// only to a session owed it (once: the SDK debounces changes close
// together into one notification).
func (r *listChangeRouting) filter(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !listChangedMethods[method] {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		r.mu.Lock()
		owed := r.owed[ss][method]
		delete(r.owed[ss], method)
		r.mu.Unlock()
		if !owed {
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

func principalIdentity(p policy.Principal) string {
	b, _ := json.Marshal(p) // sorted map keys: equal principals encode equally
	return string(b)
}

// listChanges are the items of a catalog that a rebuild added, removed or
// redefined: the before and after versions of each.
type listChanges struct {
	tools     []*catalogEntry
	resources []*resourceEntry // resources and templates
	prompts   []*promptEntry
}

func diffCatalogs(before, after *catalog) listChanges {
	toolKey := func(e *catalogEntry) string { return e.server.Name + "\x00" + e.name + "\x00" + e.input.SHA256 }
	resourceKey := func(e *resourceEntry) string {
		var b []byte
		if e.resource != nil {
			b, _ = json.Marshal(e.resource)
		} else {
			b, _ = json.Marshal(e.template)
		}
		return e.server.Name + "\x00" + string(b)
	}
	promptKey := func(e *promptEntry) string {
		b, _ := json.Marshal(e.prompt)
		return e.server.Name + "\x00" + e.name + "\x00" + string(b)
	}
	return listChanges{
		tools:     changedItems(before.entries, after.entries, toolKey),
		resources: changedItems(slices.Concat(before.resources, before.templates), slices.Concat(after.resources, after.templates), resourceKey),
		prompts:   changedItems(before.prompts, after.prompts, promptKey),
	}
}

// changedItems are the items of before and of after whose key the other
// list lacks.
func changedItems[E any](before, after []E, key func(E) string) []E {
	in := func(items []E) map[string]bool {
		m := make(map[string]bool, len(items))
		for _, e := range items {
			m[key(e)] = true
		}
		return m
	}
	inBefore, inAfter := in(before), in(after)
	var out []E
	for _, e := range before {
		if !inAfter[key(e)] {
			out = append(out, e)
		}
	}
	for _, e := range after {
		if !inBefore[key(e)] {
			out = append(out, e)
		}
	}
	return out
}

// listAnnouncement is what made the gateway re-list: an upstream's
// list_changed notification (the lists it named) or a server that stopped
// or came back.
type listAnnouncement struct {
	server                    string
	event                     string    // "list_changed", "server_stopped" or "server_started"
	from                      *upstream // the announcing upstream of a list_changed; nil otherwise
	tools, resources, prompts bool      // the lists that may have changed
}

// Events of listAnnouncement.
const (
	announcedListChanged   = "list_changed"
	announcedServerStopped = "server_stopped"
	announcedServerStarted = "server_started"
)

// auditNotes are the "custom" notes of the visibility checks made for a,
// which no client asked for: an auditor tells them from a client's own
// list by their purpose, and sees which announcement they were made for.
func (a listAnnouncement) auditNotes() map[string]any {
	var lists []any
	for _, l := range []struct {
		on   bool
		name string
	}{{a.tools, "tools"}, {a.resources, "resources"}, {a.prompts, "prompts"}} {
		if l.on {
			lists = append(lists, l.name)
		}
	}
	return map[string]any{
		"purpose":      "list_changed_routing",
		"announcement": map[string]any{"server": a.server, "event": a.event, "lists": lists},
	}
}

// routeListChanged decides, for each principal with a session on a
// downstream server, whether any changed item is one it may see (before or
// after the change), and marks its sessions owed the notifications of the
// lists that changed for it. It returns the methods anyone is owed. The
// decisions are logged as list decisions, noted as made for a (see
// auditNotes).
func (g *Gateway) routeListChanged(ctx context.Context, ch listChanges, a listAnnouncement) map[string]bool {
	ctx = policy.WithEventNotes(ctx, a.auditNotes())
	owed := map[string]bool{}
	owe := func(sessions []*mcp.ServerSession, method string) {
		g.listChanges.owe(sessions, method)
		owed[method] = true
	}
	for _, sessions := range g.listChanges.sessionsByPrincipal(g.liveSessions()) {
		p := g.listChanges.principalOf(sessions[0])
		if len(exposed(ctx, g, p, policy.ActionToolsList, ch.tools, fillTool, func(*catalogEntry) bool { return true })) > 0 {
			owe(sessions, "notifications/tools/list_changed")
		}
		if len(exposed(ctx, g, p, policy.ActionResourcesList, ch.resources, fillResource, func(*resourceEntry) bool { return true })) > 0 {
			owe(sessions, "notifications/resources/list_changed")
		}
		if len(exposed(ctx, g, p, policy.ActionPromptsList, ch.prompts, fillPrompt, func(*promptEntry) bool { return true })) > 0 {
			owe(sessions, "notifications/prompts/list_changed")
		}
	}
	return owed
}

// tellListsChanged tells the downstream sessions whose principal's lists
// changed between before and after (routeListChanged decides which; the
// others are never told, so they learn nothing of tools they cannot see),
// and registers the new tool set with every downstream server.
//
// When an upstream announced the change and its re-list shows no
// difference the gateway can see (its state may differ per upstream
// session), the announcement is passed on to the principals who may see at
// least one item of that kind of that server, and to no one else.
//
// Every list a session is marked owed is then sent by the SDK to every
// session (the sending middleware lets through the owed ones): a mark made
// with no send to follow would let a later, unrelated notification through
// to a session that must not get it.
func (g *Gateway) tellListsChanged(ctx context.Context, before, after *catalog, a listAnnouncement) {
	ch := diffCatalogs(before, after)
	if from := a.from; from != nil {
		if a.tools && len(ch.tools) == 0 {
			ch.tools = itemsOf(after.entries, from, func(e *catalogEntry) *upstream { return e.upstream })
		}
		if a.resources && len(ch.resources) == 0 {
			ch.resources = itemsOf(slices.Concat(after.resources, after.templates), from, func(e *resourceEntry) *upstream { return e.upstream })
		}
		if a.prompts && len(ch.prompts) == 0 {
			ch.prompts = itemsOf(after.prompts, from, func(e *promptEntry) *upstream { return e.upstream })
		}
	}
	owed := g.routeListChanged(ctx, ch, a)
	for _, s := range g.downstreamServers() {
		registerTools(s, before, after)
		notifyListChanged(s, owed)
	}
}

// itemsOf are the items of list that come from u.
func itemsOf[E any](list []E, u *upstream, of func(E) *upstream) []E {
	var out []E
	for _, e := range list {
		if of(e) == u {
			out = append(out, e)
		}
	}
	return out
}

// liveSessions are the open sessions of every downstream server.
func (g *Gateway) liveSessions() map[*mcp.ServerSession]bool {
	live := map[*mcp.ServerSession]bool{}
	for _, s := range g.downstreamServers() {
		for ss := range s.Sessions() {
			live[ss] = true
		}
	}
	return live
}
