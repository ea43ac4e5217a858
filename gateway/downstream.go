package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// Transport names, as they appear in input.principal.transport.
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportSSE            = "sse"
	TransportREST           = "rest"
	TransportAPI            = "api"
)

// requestMeta is what the downstream face knows about a request beyond its
// parameters; it travels to the Gateway methods in the context, and from
// there to the upstream (era, _meta, MRTR fields) and back (session).
type requestMeta struct {
	requestID string
	sessionID string

	ctx           context.Context    // the downstream request's own context
	session       *mcp.ServerSession // where progress, logs and server→client requests go
	modern        bool               // the request is of the 2026-07-28 era
	meta          mcp.Meta           // the request's _meta
	progressToken any

	// MRTR retry fields of a tools/call, prompts/get or resources/read
	// (2026-07-28).
	inputResponses mcp.InputResponseMap
	requestState   string

	// declared reads a 2026-07-28 request's declared client capabilities
	// (nil for other requests). Only a bridged call needs them, and the SDK
	// decodes them from _meta afresh on every read (a re-marshal through a
	// 32 KiB decode buffer), so they are not read for every request.
	declared interface {
		ClientCapabilities() *mcp.ClientCapabilities
	}
	bridge *bridgedCall // set on the server call of a bridged tools/call (bridge.go)
}

// capabilities are the client capabilities a 2026-07-28 request declared,
// nil for other requests.
func (m requestMeta) capabilities() *mcp.ClientCapabilities {
	if m.declared == nil {
		return nil
	}
	return m.declared.ClientCapabilities()
}

type requestMetaKey struct{}

func requestMetaFrom(ctx context.Context) requestMeta {
	m, _ := ctx.Value(requestMetaKey{}).(requestMeta)
	return m
}

// principalOf is the one place the identity of a downstream request comes
// from: the listener's configured principal, on the transport the request
// arrived by. extra is what the transport knows of the request (HTTP
// headers, a verified bearer token); nil for stdio and the Go API.
func principalOf(base policy.Principal, transport string, extra *mcp.RequestExtra) policy.Principal {
	p := base
	if extra != nil && extra.TokenInfo != nil {
		// Verified by the authenticator in front (see auth.go).
		if verified, ok := extra.TokenInfo.Extra[principalKey].(policy.Principal); ok {
			p = verified
		}
	}
	if p.AuthMethod == "" {
		p.AuthMethod = AuthNone
	}
	p.Transport = transport
	return p
}

// downstreamCapabilities are what the gateway offers clients: everything it
// can pass through, whatever the upstreams currently offer (a list that is
// empty today may fill on list_changed).
var downstreamCapabilities = &mcp.ServerCapabilities{
	Tools:       &mcp.ToolCapabilities{ListChanged: true},
	Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
	Prompts:     &mcp.PromptCapabilities{ListChanged: true},
	Completions: &mcp.CompletionCapabilities{},
	Logging:     &mcp.LoggingCapabilities{},
}

// privateCache marks every list and read result as cacheable by the
// requesting client only: what it holds was decided for its principal.
var privateCache = mcp.Cacheable{CacheScope: "private"}

// newMCPServer returns an MCP server clients talk to. Every feature request
// is answered by the Gateway method of the same name (ListTools, CallTool,
// ReadResource, GetPrompt…) for the principal principalOf finds; the
// protocol's own methods (initialize, ping, logging/setLevel,
// subscriptions/listen…) are the SDK's. When alive is not nil, its end
// cancels every request in flight (a connection-bound session gone).
func (g *Gateway) newMCPServer(base policy.Principal, transport string, alive context.Context) *mcp.Server {
	who := func(req mcp.Request) policy.Principal { return principalOf(base, transport, req.GetExtra()) }
	// A subscription the SDK makes on behalf of a 2026-07-28
	// subscriptions/listen carries no transport extra of its own: it is
	// decided for the principal of that listen request.
	subscriber := func(ctx context.Context, req mcp.Request) policy.Principal {
		if p, ok := ctx.Value(listenerKey{}).(policy.Principal); ok && req.GetExtra() == nil {
			return p
		}
		return who(req)
	}
	var s *mcp.Server
	s = mcp.NewServer(&mcp.Implementation{Name: "mcp-warden", Version: Version}, &mcp.ServerOptions{
		Capabilities: downstreamCapabilities,
		// A client's changed roots are announced to the servers that may
		// have asked for them.
		RootsListChangedHandler: g.rootsChangedHandler,
		// The SDK keeps the subscriptions (and sends updates to them) once
		// these allow them.
		SubscribeHandler: func(ctx context.Context, req *mcp.SubscribeRequest) error {
			return g.subscribeResource(withRequestMeta(ctx, req), subscriber(ctx, req), req.Session, req.Params.URI)
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			g.endSubscriptions(req.Session, map[string]bool{req.Params.URI: true})
			return nil
		},
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if alive != nil {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(alive, cancel)()
			}
			ss, _ := req.GetSession().(*mcp.ServerSession)
			switch method {
			case "initialize":
				g.listChanges.record(ss, who(req), g.liveSessions)
			case "subscriptions/listen":
				ctx = context.WithValue(ctx, listenerKey{}, who(req))
				g.listChanges.record(ss, who(req), g.liveSessions)
				defer g.listChanges.forget(ss)
			}
			res, err := g.answer(ctx, method, req, who)
			if err == errNotIntercepted {
				return next(ctx, method, req)
			}
			return res, err
		}
	})
	s.AddSendingMiddleware(g.listChanges.filter)
	g.addDownstreamServer(s)
	if cat, err := g.currentCatalog(); err == nil {
		registerTools(s, nil, cat)
	}
	return s
}

// registerTools mirrors the exposed tools (before: the previous catalog)
// into s's own registry. They are never called there — the middleware
// answers tools/list and tools/call — but the SDK validates a 2026-07-28
// request's Mcp-Param-* headers against the definition it finds there, and
// tells the sessions that the list changed.
func registerTools(s *mcp.Server, before, after *catalog) {
	if before != nil {
		var gone []string
		for _, e := range before.entries {
			if _, ok := after.byName[e.name]; !ok {
				gone = append(gone, e.name)
			}
		}
		s.RemoveTools(gone...)
	}
	for _, e := range after.entries {
		if before != nil && before.byName[e.name] != nil && before.byName[e.name].tool == e.tool {
			continue
		}
		func() {
			defer func() { _ = recover() }() // a schema the SDK refuses only loses header validation
			s.AddTool(e.exposedTool(), func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, errNotIntercepted
			})
		}()
	}
}

var errNotIntercepted = fmt.Errorf("not intercepted")

// listenerKey holds the principal of a subscriptions/listen request in its
// context, where the SDK's resource subscriptions on its behalf find it.
type listenerKey struct{}

// answer serves the feature methods through the Gateway methods, which
// decide by policy and forward; errNotIntercepted leaves the rest to the SDK.
func (g *Gateway) answer(ctx context.Context, method string, req mcp.Request, who func(mcp.Request) policy.Principal) (mcp.Result, error) {
	switch req.(type) {
	case *mcp.ListToolsRequest, *mcp.CallToolRequest, *mcp.ListResourcesRequest, *mcp.ListResourceTemplatesRequest,
		*mcp.ReadResourceRequest, *mcp.ListPromptsRequest, *mcp.GetPromptRequest, *mcp.CompleteRequest:
		ctx = withRequestMeta(ctx, req)
	default:
		return nil, errNotIntercepted
	}
	ctx, done := g.sessionCalls.track(ctx, req)
	defer done()
	switch r := req.(type) {
	case *mcp.ListToolsRequest:
		tools, err := g.ListTools(ctx, who(req))
		if err != nil {
			return nil, internalError(err)
		}
		return &mcp.ListToolsResult{Tools: tools, Cacheable: privateCache}, nil
	case *mcp.CallToolRequest:
		args, err := decodeArguments(r.Params.Arguments)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		res, err := g.CallTool(ctx, who(req), r.Params.Name, args)
		if u, ok := err.(*unknownTool); ok {
			return nil, u.rpc // the SDK sends *jsonrpc.Error as is
		}
		return res, err
	case *mcp.ListResourcesRequest:
		rs, err := g.ListResources(ctx, who(req))
		if err != nil {
			return nil, internalError(err)
		}
		return &mcp.ListResourcesResult{Resources: rs, Cacheable: privateCache}, nil
	case *mcp.ListResourceTemplatesRequest:
		ts, err := g.ListResourceTemplates(ctx, who(req))
		if err != nil {
			return nil, internalError(err)
		}
		return &mcp.ListResourceTemplatesResult{ResourceTemplates: ts, Cacheable: privateCache}, nil
	case *mcp.ReadResourceRequest:
		res, err := g.ReadResource(ctx, who(req), r.Params)
		if err != nil {
			return nil, err
		}
		res.CacheScope = privateCache.CacheScope
		return res, nil
	case *mcp.ListPromptsRequest:
		ps, err := g.ListPrompts(ctx, who(req))
		if err != nil {
			return nil, internalError(err)
		}
		return &mcp.ListPromptsResult{Prompts: ps, Cacheable: privateCache}, nil
	case *mcp.GetPromptRequest:
		return g.GetPrompt(ctx, who(req), r.Params)
	case *mcp.CompleteRequest:
		return g.Complete(ctx, who(req), r.Params)
	}
	return nil, errNotIntercepted
}

// withRequestMeta puts what the gateway needs to know of a downstream
// request into ctx.
func withRequestMeta(ctx context.Context, req mcp.Request) context.Context {
	m := requestMeta{ctx: ctx}
	if s, ok := req.GetSession().(*mcp.ServerSession); ok && s != nil {
		m.session, m.sessionID = s, s.ID()
	}
	if v, ok := req.(interface{ ProtocolVersion() string }); ok {
		m.modern = v.ProtocolVersion() >= modernProtocolVersion
	}
	if v, ok := req.(interface {
		ClientCapabilities() *mcp.ClientCapabilities
	}); ok && m.modern {
		m.declared = v
	}
	if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		m.meta = p.GetMeta()
		if pp, ok := p.(interface{ GetProgressToken() any }); ok {
			m.progressToken = pp.GetProgressToken()
		}
	}
	switch r := req.(type) {
	case *mcp.CallToolRequest:
		if r.Params != nil {
			m.inputResponses, m.requestState = r.Params.InputResponses, r.Params.RequestState
		}
	case *mcp.GetPromptRequest:
		if r.Params != nil {
			m.inputResponses, m.requestState = r.Params.InputResponses, r.Params.RequestState
		}
	case *mcp.ReadResourceRequest:
		if r.Params != nil {
			m.inputResponses, m.requestState = r.Params.InputResponses, r.Params.RequestState
		}
	}
	return context.WithValue(ctx, requestMetaKey{}, m)
}

// notifyListChanged makes s send the list_changed notifications methods
// names to its sessions: the SDK sends them only when its own registry
// changes, so a placeholder is added and removed (the gateway answers the
// lists itself; the placeholder is never listed). The SDK sends one
// notification for changes close together.
func notifyListChanged(s *mcp.Server, methods map[string]bool) {
	const placeholder = "mcp-warden-list-changed"
	if methods["notifications/tools/list_changed"] {
		s.AddTool(&mcp.Tool{Name: placeholder, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, errNotIntercepted
			})
		s.RemoveTools(placeholder)
	}
	if methods["notifications/resources/list_changed"] {
		s.AddResource(&mcp.Resource{Name: placeholder, URI: placeholder + ":"},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return nil, errNotIntercepted
			})
		s.RemoveResources(placeholder + ":")
	}
	if methods["notifications/prompts/list_changed"] {
		s.AddPrompt(&mcp.Prompt{Name: placeholder},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return nil, errNotIntercepted
			})
		s.RemovePrompts(placeholder)
	}
}

// decodeArguments reads tools/call arguments as a JSON object, keeping
// numbers exactly as sent.
func decodeArguments(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return map[string]any{}, nil
	}
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return nil, fmt.Errorf("tool arguments must be a JSON object: %v", err)
	}
	return args, nil
}

func internalError(err error) error {
	if rpcErr, ok := err.(*jsonrpc.Error); ok {
		return rpcErr
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// Serve answers one downstream client on t (for example StdioTransport())
// as principal, until the client disconnects or ctx
// ends.
func (g *Gateway) Serve(ctx context.Context, t mcp.Transport, principal policy.Principal) error {
	transport := principal.Transport
	if transport == "" {
		transport = TransportStdio
	}
	s := g.newMCPServer(principal, transport, nil)
	defer g.forgetDownstreamServer(s)
	return s.Run(ctx, t)
}

// HTTPHandler returns the HTTP face of the gateway, to be mounted at the
// root of a listener:
//
//	/mcp           streamable HTTP, both eras: requests of the 2026-07-28
//	               era are served statelessly, older ones in sessions
//	/sse           the deprecated HTTP+SSE transport (2024-11-05)
//	/mcp/v1/...    the REST face (tools, execute, spec)
//
// Every request first passes the Host and Origin checks, the body size
// limit and the read/write deadlines (see HTTPOptions). Until
// authentication is configured every request is made as principal.
func (g *Gateway) HTTPHandler(principal policy.Principal, opts ...HTTPOptions) http.Handler {
	var o HTTPOptions
	for _, opt := range opts {
		o.AllowedOrigins = append(o.AllowedOrigins, opt.AllowedOrigins...)
		o.Metrics = o.Metrics || opt.Metrics
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", g.streamableHandler(principal))
	// An HTTP+SSE session lives as long as the client's GET stream (the SDK
	// asks for its server once per GET): its end cancels its calls, which
	// the SDK would otherwise wait for before closing the session.
	mux.Handle("/sse", mcp.NewSSEHandler(func(r *http.Request) *mcp.Server {
		s := g.newMCPServer(principal, TransportSSE, r.Context())
		context.AfterFunc(r.Context(), func() { g.forgetDownstreamServer(s) })
		return s
	}, nil))
	g.restRoutes(mux, principal)
	if o.Metrics {
		mux.Handle("/metrics", g.MetricsHandler())
	}
	// Shutdown waits for requests in flight (not for GET streams and
	// 2026-07-28 subscriptions, which never end on their own) until their
	// responses are written.
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Header.Get("Mcp-Method") != "subscriptions/listen" {
			g.inflight.add()
			defer g.inflight.done()
		}
		mux.ServeHTTP(w, r)
	})
	// Authentication, when configured, guards every path but the
	// protected-resource metadata, after the Host and Origin checks.
	outer := http.NewServeMux()
	g.auth.mount(outer, "/", counted)
	return httpHygiene(outer, o.AllowedOrigins)
}

// streamableHandler serves both eras on one endpoint with two SDK handlers
// (the SDK serves 2026-07-28 only statelessly, and server→client requests
// only in sessions): a request is modern when its MCP-Protocol-Version
// header names a version that is not one of the legacy ones.
func (g *Gateway) streamableHandler(principal policy.Principal) http.Handler {
	s := g.newMCPServer(principal, TransportStreamableHTTP, nil)
	get := func(*http.Request) *mcp.Server { return s }
	// The hygiene in front checks Host and Origin for both.
	legacy := g.sessionCalls.endingSessions(mcp.NewStreamableHTTPHandler(get,
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true, SessionTimeout: sessionIdleTimeout}))
	// A 2026-07-28 request lives as long as its POST: a client that closes
	// the stream cancels the call, upstream too.
	modern := mcp.NewStreamableHTTPHandler(get,
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isModernRequest(r) {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// sessionIdleTimeout ends legacy HTTP sessions a client abandoned. (A
// variable so that tests can see a session time out.)
var sessionIdleTimeout = 30 * time.Minute

func isModernRequest(r *http.Request) bool {
	v := strings.TrimSpace(r.Header.Get("MCP-Protocol-Version"))
	if v == "" || r.Header.Get("Mcp-Session-Id") != "" {
		return false
	}
	switch v {
	case "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05":
		return false
	}
	return true
}
