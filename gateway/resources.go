package gateway

import (
	"context"
	"fmt"
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
	res, err := forward(ctx, e.upstream, func(ctx context.Context, s *mcp.ClientSession, meta mcp.Meta) (*mcp.ReadResourceResult, error) {
		return s.ReadResource(ctx, &mcp.ReadResourceParams{Meta: meta, URI: params.URI,
			InputResponses: params.InputResponses, RequestState: params.RequestState})
	})
	if err != nil {
		return nil, upstreamError(e.upstream, err)
	}
	stripServerInfo(res)
	return res, nil
}

// SubscribeResource subscribes principal's session to updates of uri: a
// subscription is allowed exactly when a read would be.
func (g *Gateway) subscribeResource(ctx context.Context, principal policy.Principal, uri string, subscribe bool) error {
	e, err := g.allowResource(ctx, principal, uri)
	if err != nil {
		return err
	}
	if !subscribe {
		// A 2026-07-28 subscription ends with its listen request, whose
		// context is done by then: the unsubscription must still go out.
		ctx = context.WithoutCancel(ctx)
	}
	return upstreamError(e.upstream, e.upstream.subscriptions.change(uri, subscribe, func() error {
		_, err := forward(ctx, e.upstream, func(ctx context.Context, s *mcp.ClientSession, _ mcp.Meta) (struct{}, error) {
			if subscribe {
				return struct{}{}, s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
			}
			return struct{}{}, s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
		})
		return err
	}))
}

// subscriptionCounts counts the downstream subscriptions to each URI of one
// upstream: the upstream holds one subscription for all of them, made by
// the first and ended by the last, so that one client unsubscribing does
// not stop another's updates.
type subscriptionCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

// change counts one subscription to uri in or out, and calls send when
// that starts or ends the upstream's subscription (a failed send undoes
// the count).
func (c *subscriptionCounts) change(uri string, subscribe bool, send func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	n := c.counts[uri]
	switch {
	case subscribe && n > 0:
		c.counts[uri]++
		return nil
	case !subscribe && n == 0: // not subscribed: nothing to end
		return nil
	case !subscribe && n > 1:
		c.counts[uri]--
		return nil
	}
	if err := send(); err != nil && subscribe {
		return err
	}
	if subscribe {
		c.counts[uri] = 1
	} else {
		delete(c.counts, uri)
	}
	return nil
}

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
