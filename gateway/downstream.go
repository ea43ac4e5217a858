package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// Transport names, as they appear in input.principal.transport.
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportAPI            = "api"
)

// requestMeta is what the downstream face knows about a request beyond its
// parameters; it travels to ListTools/CallTool in the context.
type requestMeta struct {
	requestID string
	sessionID string
}

type requestMetaKey struct{}

func requestMetaFrom(ctx context.Context) requestMeta {
	m, _ := ctx.Value(requestMetaKey{}).(requestMeta)
	return m
}

// newMCPServer returns the MCP server clients talk to. Its tools/list and
// tools/call are answered by ListTools and CallTool for the principal that
// principalOf finds in each request; every other method is the SDK's.
func (g *Gateway) newMCPServer(principalOf func(mcp.Request) policy.Principal) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-warden", Version: Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				ctx = context.WithValue(ctx, requestMetaKey{}, metaOf(req))
				tools, err := g.ListTools(ctx, principalOf(req))
				if err != nil {
					return nil, internalError(err)
				}
				return &mcp.ListToolsResult{Tools: tools}, nil
			case "tools/call":
				call, ok := req.(*mcp.CallToolRequest)
				if !ok {
					return nil, internalError(fmt.Errorf("tools/call request of type %T", req))
				}
				args, err := decodeArguments(call.Params.Arguments)
				if err != nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
				}
				ctx = context.WithValue(ctx, requestMetaKey{}, metaOf(req))
				res, err := g.CallTool(ctx, principalOf(req), call.Params.Name, args)
				if err != nil {
					return nil, err
				}
				return res, nil
			}
			return next(ctx, method, req)
		}
	})
	return s
}

func metaOf(req mcp.Request) requestMeta {
	var m requestMeta
	if s, ok := req.GetSession().(*mcp.ServerSession); ok && s != nil {
		m.sessionID = s.ID()
	}
	return m
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

// Serve answers one downstream client on t (for example
// &mcp.StdioTransport{}) as principal, until the client disconnects or ctx
// ends.
func (g *Gateway) Serve(ctx context.Context, t mcp.Transport, principal policy.Principal) error {
	if principal.Transport == "" {
		principal.Transport = TransportStdio
	}
	s := g.newMCPServer(func(req mcp.Request) policy.Principal { return principalOf(req, principal) })
	return s.Run(ctx, t)
}

// principalOf is who made req: the principal the authenticator verified
// (carried in the request's TokenInfo), else the configured one.
func principalOf(req mcp.Request, configured policy.Principal) policy.Principal {
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		if p, ok := extra.TokenInfo.Extra[principalKey].(policy.Principal); ok {
			return p
		}
	}
	if configured.AuthMethod == "" {
		configured.AuthMethod = AuthNone
	}
	return configured
}

// HTTPHandler returns the streamable-HTTP face of the gateway, to be mounted
// at a path such as /mcp. Requests carry no identity of their own here:
// they are made as principal unless an authenticating handler in front
// (as Run mounts when auth is configured) attached a verified one.
func (g *Gateway) HTTPHandler(principal policy.Principal) http.Handler {
	principal.Transport = TransportStreamableHTTP
	s := g.newMCPServer(func(req mcp.Request) policy.Principal { return principalOf(req, principal) })
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}
