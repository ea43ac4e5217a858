package gateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// ListResources returns the resources principal may see, each decided by
// policy (action resources/list) in one logged list decision.
func (g *Gateway) ListResources(ctx context.Context, principal policy.Principal) ([]*mcp.Resource, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	return exposed(ctx, g, principal, policy.ActionResourcesList, cat.resources,
		fillResource, func(e *resourceEntry) *mcp.Resource { return e.resource }), nil
}

// fillResource puts a resource (or template) into a list decision's input.
func fillResource(e *resourceEntry, in *policy.Input) { in.Server, in.Resource = e.server, e.input }

// ListResourceTemplates returns the resource templates principal may see,
// decided like resources (action resources/list, resource.template true).
func (g *Gateway) ListResourceTemplates(ctx context.Context, principal policy.Principal) ([]*mcp.ResourceTemplate, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	return exposed(ctx, g, principal, policy.ActionResourcesList, cat.templates, fillResource,
		func(e *resourceEntry) *mcp.ResourceTemplate { return e.template }), nil
}

// ReadResource reads the resource at uri for principal, after policy allows
// it (action resources/read, logged). A resource nothing serves and one the
// policy hides give the same resource-not-found error.
func (g *Gateway) ReadResource(ctx context.Context, principal policy.Principal, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	e, err := g.allowResource(ctx, principal, params.URI)
	if err != nil {
		return nil, err
	}
	call := func(ctx context.Context, u *upstream) (*mcp.ReadResourceResult, error) {
		return forward(ctx, u, func(ctx context.Context, s *mcp.ClientSession, meta mcp.Meta) (*mcp.ReadResourceResult, error) {
			return s.ReadResource(ctx, &mcp.ReadResourceParams{Meta: meta, URI: params.URI,
				InputResponses: params.InputResponses, RequestState: params.RequestState})
		})
	}
	res, err := forwardBridged(g, ctx, principal, e.upstream, bridgedRequest{method: "resources/read", name: params.URI}, call)
	if err != nil {
		return nil, upstreamError(e.upstream, err)
	}
	stripServerInfo(res)
	return res, nil
}

// subscribeResource subscribes the request's downstream session to updates
// of uri for principal: a subscription is allowed exactly when a read would
// be. The session's subscriptions end with it, however it ends.
func (g *Gateway) subscribeResource(ctx context.Context, principal policy.Principal, ss *mcp.ServerSession, uri string) error {
	e, err := g.allowResource(ctx, principal, uri)
	if err != nil {
		return err
	}
	if err := g.subscriptions[e.upstream.cfg.Name].add(ss, uri, func() error {
		return upstreamSubscription(ctx, e.upstream, uri, true)
	}); err != nil {
		return upstreamError(e.upstream, err)
	}
	g.sessionEnds.watch(ss, func() { g.endSubscriptions(ss, nil) })
	return nil
}

// endSubscriptions ends the downstream session's subscriptions to the URIs
// in only (every one when only is nil). Ending one decides nothing: it
// reveals nothing and must not fail, whatever policy says of the resource
// by now. A 2026-07-28 subscription ends with its listen request, whose
// context is done by then, and a session gone has none: the upstream's
// unsubscription runs on a context of its own.
func (g *Gateway) endSubscriptions(ss *mcp.ServerSession, only map[string]bool) {
	g.mu.RLock()
	ups, closed := slices.Clone(g.upstreams), g.closed
	g.mu.RUnlock()
	for name, subs := range g.subscriptions {
		// The server's running process, if any: one that is down (being
		// restarted) holds no subscription to end.
		i := slices.IndexFunc(ups, func(u *upstream) bool { return u.cfg.Name == name })
		subs.end(ss, only, func(uri string) {
			if closed || i < 0 { // stopped upstreams took their subscriptions with them
				return
			}
			if err := upstreamSubscription(context.Background(), ups[i], uri, false); err != nil {
				g.logger.Warn("resources/unsubscribe failed", "server", name, "uri", uri, "error", err)
			}
		})
	}
}

// resubscribe subscribes u, a restarted server, to every resource its
// previous process was subscribed to for downstream sessions that are
// still subscribed.
func (g *Gateway) resubscribe(ctx context.Context, u *upstream) {
	for _, uri := range g.subscriptions[u.cfg.Name].uris() {
		if err := upstreamSubscription(ctx, u, uri, true); err != nil {
			g.logger.Warn("resources/subscribe after a restart failed: clients get no updates of the resource", "server", u.cfg.Name, "uri", uri, "error", err)
		}
	}
}

// upstreamSubscription subscribes u to uri, or unsubscribes it. It always
// goes over the legacy link, whatever the era of the downstream request
// that starts or ends it, so that the unsubscription reaches the session
// that holds the subscription.
func upstreamSubscription(ctx context.Context, u *upstream, uri string, subscribe bool) error {
	ctx = context.WithValue(ctx, requestMetaKey{}, requestMeta{})
	_, err := forward(ctx, u, func(ctx context.Context, s *mcp.ClientSession, _ mcp.Meta) (struct{}, error) {
		if subscribe {
			return struct{}{}, s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		}
		return struct{}{}, s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	})
	return err
}

// resourceSubscriptions are the downstream sessions subscribed to each
// resource URI of one upstream. The upstream holds one subscription for all
// of them, made by the first and ended by the last (of either era), so
// that one client unsubscribing or going away does not stop another's
// updates, and the last one gone does not leave the upstream subscribed.
type resourceSubscriptions struct {
	mu       sync.Mutex
	sessions map[string]map[*mcp.ServerSession]bool // URI → subscribed sessions
}

// add subscribes ss to uri, calling subscribe first when no session was
// (its failure is add's, and subscribes nobody). A session subscribing
// again is subscribed once.
func (r *resourceSubscriptions) add(ss *mcp.ServerSession, uri string, subscribe func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sessions[uri]) == 0 {
		if err := subscribe(); err != nil {
			return err
		}
	}
	if r.sessions == nil {
		r.sessions = map[string]map[*mcp.ServerSession]bool{}
	}
	if r.sessions[uri] == nil {
		r.sessions[uri] = map[*mcp.ServerSession]bool{}
	}
	r.sessions[uri][ss] = true
	return nil
}

// uris lists the URIs some session is subscribed to.
func (r *resourceSubscriptions) uris() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.sessions))
}

// end ends ss's subscriptions to the URIs in only (every one when only is
// nil), calling unsubscribe for each URI no session is subscribed to any
// more.
func (r *resourceSubscriptions) end(ss *mcp.ServerSession, only map[string]bool, unsubscribe func(uri string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uri, sessions := range r.sessions {
		if (only != nil && !only[uri]) || !sessions[ss] {
			continue
		}
		delete(sessions, ss)
		if len(sessions) == 0 {
			delete(r.sessions, uri)
			unsubscribe(uri)
		}
	}
}

// sessionEnds runs a function when a downstream session ends, whatever
// ends it: a DELETE, a session timeout, a dropped stdio or SSE client, the
// end of a 2026-07-28 request, the gateway closing. The SDK tells nothing
// of a session's end but to ServerSession.Wait, so each watched session
// has a goroutine waiting; Close waits for them once every session is
// closed.
type sessionEnds struct {
	mu      sync.Mutex
	watched map[*mcp.ServerSession]bool
	wg      sync.WaitGroup
}

// watch runs ended once ss has ended, unless ss is watched already. A
// session watched after its end (a request that raced it) is ended at
// once: Wait returns at once on a closed session.
func (w *sessionEnds) watch(ss *mcp.ServerSession, ended func()) {
	if ss == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[ss] {
		return
	}
	if w.watched == nil {
		w.watched = map[*mcp.ServerSession]bool{}
	}
	w.watched[ss] = true
	w.wg.Go(func() {
		_ = ss.Wait()
		// Forgotten before ended runs: what is added after this point
		// starts a new watch, what was added before, ended sees.
		w.mu.Lock()
		delete(w.watched, ss)
		w.mu.Unlock()
		ended()
	})
}

// wait waits until every watched session has ended and been handled.
func (w *sessionEnds) wait() { w.wg.Wait() }

// allowResource finds what serves uri and decides the read.
func (g *Gateway) allowResource(ctx context.Context, principal policy.Principal, uri string) (*resourceEntry, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	e := cat.resourceFor(uri)
	if e == nil {
		return nil, resourceNotFound(ctx, uri)
	}
	in := *e.input
	in.URI = uri
	d := g.decide(ctx, principal, policy.Input{Action: policy.ActionResourcesRead, Server: e.server, Resource: &in})
	if !d.Allow {
		if d.Hidden {
			return nil, resourceNotFound(ctx, uri)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "denied by policy: " + d.Reason}
	}
	return e, nil
}

// resourceNotFound is the error for a resource nothing serves: -32602 in
// the 2026-07-28 era, -32002 before, as the SDK's own servers answer.
func resourceNotFound(ctx context.Context, uri string) error {
	if requestMetaFrom(ctx).modern {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("Resource not found: %s", uri)}
	}
	return mcp.ResourceNotFoundError(uri)
}

// resourceUpdated tells the downstream sessions subscribed to the resource;
// the SDK keeps the subscriptions, each of which policy allowed.
func (g *Gateway) resourceUpdated(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
	for _, s := range g.downstreamServers() {
		_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: p.URI})
	}
}
