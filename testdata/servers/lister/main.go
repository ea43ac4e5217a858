// Command lister is an MCP stdio server whose lists change on request and
// which asks its client for roots, for tests of list_changed routing and
// roots relay through a gateway:
//
//   - add_tool {"name"}: adds a tool of that name (the server sends
//     notifications/tools/list_changed); remove_tool {"name"} removes it.
//   - add_prompt {"name"}: adds a prompt of that name
//     (notifications/prompts/list_changed).
//   - add_resource {"name"}: adds the resource test://<name>
//     (notifications/resources/list_changed); remove_resource {"name"}
//     removes it. Every resources/subscribe and resources/unsubscribe is
//     written to stderr as "subscribed <uri>" / "unsubscribed <uri>".
//   - roots: sends roots/list to the client and answers with the root URIs
//     it got, one per line, or "error: <error>".
//   - roots_later: answers at once, then, with no call of the client's in
//     flight, sends roots/list and writes "roots later: <URIs or error>" to
//     stderr.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/gateway"
)

var nameSchema = json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)

// rootsOf is the root URIs of res, one per line, or the error.
func rootsOf(res *mcp.ListRootsResult, err error) string {
	if err != nil {
		return fmt.Sprintf("error: %v", err)
	}
	var uris []string
	for _, r := range res.Roots {
		uris = append(uris, r.URI)
	}
	return strings.Join(uris, "\n")
}

func main() {
	log.SetFlags(0)
	s := mcp.NewServer(&mcp.Implementation{Name: "lister", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Prompts: &mcp.PromptCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true}},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			log.Printf("subscribed %s", req.Params.URI)
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			log.Printf("unsubscribed %s", req.Params.URI)
			return nil
		},
	})
	nameOf := func(req *mcp.CallToolRequest) string {
		var args struct{ Name string }
		_ = json.Unmarshal(req.Params.Arguments, &args)
		return args.Name
	}
	done := func(msg string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
	}
	s.AddTool(&mcp.Tool{Name: "add_tool", InputSchema: nameSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name := nameOf(req)
		s.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return done(name), nil })
		return done("added " + name), nil
	})
	s.AddTool(&mcp.Tool{Name: "remove_tool", InputSchema: nameSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.RemoveTools(nameOf(req))
		return done("removed " + nameOf(req)), nil
	})
	s.AddTool(&mcp.Tool{Name: "add_prompt", InputSchema: nameSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name := nameOf(req)
		s.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name}}}}, nil
		})
		return done("added " + name), nil
	})
	s.AddTool(&mcp.Tool{Name: "add_resource", InputSchema: nameSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		uri := "test://" + nameOf(req)
		s.AddResource(&mcp.Resource{Name: nameOf(req), URI: uri}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: uri}}}, nil
		})
		return done("added " + uri), nil
	})
	s.AddTool(&mcp.Tool{Name: "remove_resource", InputSchema: nameSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.RemoveResources("test://" + nameOf(req))
		return done("removed test://" + nameOf(req)), nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greeting"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello"}}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "roots", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return done(rootsOf(req.Session.ListRoots(ctx, nil))), nil
	})
	s.AddTool(&mcp.Tool{Name: "roots_later", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		go func() {
			time.Sleep(200 * time.Millisecond) // the call's answer has reached the client by then
			log.Printf("roots later: %s", rootsOf(req.Session.ListRoots(context.Background(), nil)))
		}()
		return done("asking later"), nil
	})
	if err := s.Run(context.Background(), gateway.StdioTransport()); err != nil {
		log.Fatal(err)
	}
}
