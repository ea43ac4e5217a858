package gateway

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rootsAudience are the downstream sessions an upstream has served a
// request of, among those that announce changes to their roots: a server
// learns a client's roots only by asking during that client's call (see
// callRegistry.listRoots), so only these servers can hold roots of the
// client that are now stale.
type rootsAudience struct {
	mu       sync.Mutex
	sessions map[*mcp.ServerSession]bool
	pruneAt  int // forget closed sessions when there are this many
}

// add records that the upstream served ss, when ss announces root
// changes. live lists the open sessions, to forget the others now and then.
func (a *rootsAudience) add(ss *mcp.ServerSession, live func() map[*mcp.ServerSession]bool) {
	if ss == nil {
		return
	}
	init := ss.InitializeParams()
	if init == nil || init.Capabilities == nil || init.Capabilities.RootsV2 == nil || !init.Capabilities.RootsV2.ListChanged {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sessions[ss] {
		return
	}
	if a.sessions == nil {
		a.sessions = map[*mcp.ServerSession]bool{}
	}
	a.sessions[ss] = true
	if len(a.sessions) >= max(a.pruneAt, 64) {
		alive := live()
		for s := range a.sessions {
			if !alive[s] {
				delete(a.sessions, s)
			}
		}
		a.pruneAt = 2 * len(a.sessions)
	}
}

func (a *rootsAudience) has(ss *mcp.ServerSession) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[ss]
}

// rootsChangedURI names the placeholder root whose addition makes the SDK
// send notifications/roots/list_changed on a link: the gateway answers
// roots/list itself (relayRequests), so the placeholder is never listed.
const rootsChangedURI = "mcp-warden:roots-changed"

// rootsChanged forwards a downstream client's notifications/roots/list_changed
// to the legacy sessions of the upstreams that served it (2026-07-28 has
// no such notification), so that they ask for its roots afresh.
func (g *Gateway) rootsChanged(ss *mcp.ServerSession) {
	g.mu.RLock()
	var told []*upstream
	for _, primary := range g.upstreams {
		for _, u := range append([]*upstream{primary}, primary.allInstances()...) {
			if u.rootsAudience.has(ss) && u.legacy != nil && u.legacy.client != nil {
				told = append(told, u)
			}
		}
	}
	g.mu.RUnlock()
	for _, u := range told {
		u.legacy.client.AddRoots(&mcp.Root{URI: rootsChangedURI})
		g.logger.Debug("client roots changed: told the server", "server", u.cfg.Name)
	}
}

// rootsChangedHandler is the downstream servers' handler of
// notifications/roots/list_changed. It runs on the session's read loop,
// so the upstreams are told from a goroutine of their own.
func (g *Gateway) rootsChangedHandler(_ context.Context, req *mcp.RootsListChangedRequest) {
	ss := req.Session
	g.inBackground(func() { g.rootsChanged(ss) })
}
