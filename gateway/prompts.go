package gateway

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// ListPrompts returns the prompts principal may see, each decided by policy
// (action prompts/list) in one logged list decision.
func (g *Gateway) ListPrompts(ctx context.Context, principal policy.Principal) ([]*mcp.Prompt, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	return exposed(ctx, g, principal, policy.ActionPromptsList, cat.prompts, fillPrompt, (*promptEntry).exposedPrompt), nil
}

func fillPrompt(e *promptEntry, in *policy.Input) { in.Server, in.Prompt = e.server, e.input }

// GetPrompt gets the prompt exposed as params.Name for principal, after
// policy allows it (action prompts/get, with the arguments; logged). A
// prompt that does not exist and one the policy hides give the same error.
func (g *Gateway) GetPrompt(ctx context.Context, principal policy.Principal, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	e, err := g.allowPrompt(ctx, principal, params.Name, params.Arguments)
	if err != nil {
		return nil, err
	}
	call := func(ctx context.Context, u *upstream) (*mcp.GetPromptResult, error) {
		return forward(ctx, u, func(ctx context.Context, s *mcp.ClientSession, meta mcp.Meta) (*mcp.GetPromptResult, error) {
			return s.GetPrompt(ctx, &mcp.GetPromptParams{Meta: meta, Name: e.prompt.Name, Arguments: params.Arguments,
				InputResponses: params.InputResponses, RequestState: params.RequestState})
		})
	}
	res, err := forwardBridged(g, ctx, principal, e.upstream, bridgedRequest{method: "prompts/get", name: params.Name, args: params.Arguments}, call)
	if err != nil {
		return nil, upstreamError(e.upstream, err)
	}
	stripServerInfo(res)
	return res, nil
}

func (g *Gateway) allowPrompt(ctx context.Context, principal policy.Principal, name string, args map[string]string) (*promptEntry, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	e, ok := cat.promptByID[name]
	if !ok {
		return nil, unknownPromptError(name)
	}
	in := policy.Input{Action: policy.ActionPromptsGet, Server: e.server, Prompt: e.input}
	if args != nil {
		in.Arguments = make(map[string]any, len(args))
		for k, v := range args {
			in.Arguments[k] = v
		}
	}
	if d := g.decide(ctx, principal, in); !d.Allow {
		if d.Hidden {
			return nil, unknownPromptError(name)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "denied by policy: " + d.Reason}
	}
	return e, nil
}

func unknownPromptError(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", name)}
}

// Complete forwards a completion/complete for an argument of a prompt or a
// resource template. It is allowed when the referenced prompt may be got,
// or a read of the template's URI allowed (the decision is logged).
func (g *Gateway) Complete(ctx context.Context, principal policy.Principal, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	if params.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete needs a ref"}
	}
	var (
		u   *upstream
		ref = *params.Ref
	)
	switch ref.Type {
	case "ref/prompt":
		e, err := g.allowPrompt(ctx, principal, ref.Name, nil)
		if err != nil {
			return nil, err
		}
		u, ref.Name = e.upstream, e.prompt.Name
	case "ref/resource":
		cat, err := g.currentCatalog()
		if err != nil {
			return nil, err
		}
		var e *resourceEntry
		for _, t := range cat.templates {
			if t.template.URITemplate == ref.URI {
				e = t
				break
			}
		}
		if e == nil {
			if e, err = g.allowResource(ctx, principal, ref.URI); err != nil {
				return nil, err
			}
		} else if d := g.decide(ctx, principal, policy.Input{Action: policy.ActionResourcesRead, Server: e.server, Resource: e.input}); !d.Allow {
			return nil, resourceNotFound(ctx, ref.URI)
		}
		u = e.upstream
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown completion reference type %q", ref.Type)}
	}
	if caps := u.capabilities(); caps == nil || caps.Completions == nil {
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
	}
	inst, release, err := g.instanceFor(ctx, u, principal)
	if err != nil {
		return nil, upstreamError(u, err)
	}
	defer release()
	res, err := forward(ctx, inst, func(ctx context.Context, s *mcp.ClientSession, meta mcp.Meta) (*mcp.CompleteResult, error) {
		return s.Complete(ctx, &mcp.CompleteParams{Meta: meta, Ref: &ref, Argument: params.Argument, Context: params.Context})
	})
	if err != nil {
		return nil, upstreamError(u, err)
	}
	stripServerInfo(res)
	return res, nil
}
