package gateway

import (
	"context"
	"fmt"

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
	_, err = forward(ctx, e.upstream, func(ctx context.Context, s *mcp.ClientSession, _ mcp.Meta) (struct{}, error) {
		if subscribe {
			return struct{}{}, s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		}
		return struct{}{}, s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	})
	return upstreamError(e.upstream, err)
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
