// Command waiter is an MCP stdio server whose calls wait, for tests of
// cancellation through a gateway. Every line it writes to stderr says what
// happened to a call, so that a test reading the gateway's log of the
// server's stderr can tell a cancelled call from a finished one:
//
//   - wait {"id"}: writes "wait started <id>", then blocks until the call is
//     cancelled and writes "wait cancelled <id>".
//   - ask {"after_ms"}: sends an elicitation request to the client and
//     cancels it after after_ms milliseconds; answers with what became of
//     it ("answered" or "cancelled: <error>").
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/gateway"
)

func main() {
	log.SetFlags(0)
	s := mcp.NewServer(&mcp.Implementation{Name: "waiter", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ ID string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			log.Printf("wait started %s", args.ID)
			<-ctx.Done()
			log.Printf("wait cancelled %s", args.ID)
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object","properties":{"after_ms":{"type":"integer"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				AfterMS int `json:"after_ms"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			ectx, cancel := context.WithTimeout(ctx, time.Duration(args.AfterMS)*time.Millisecond)
			defer cancel()
			outcome := "answered"
			if _, err := req.Session.Elicit(ectx, &mcp.ElicitParams{Message: "waiting for you",
				RequestedSchema: json.RawMessage(`{"type":"object","properties":{}}`)}); err != nil {
				outcome = fmt.Sprintf("cancelled: %v", err)
			}
			log.Printf("ask %s", outcome)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: outcome}}}, nil
		})
	if err := s.Run(context.Background(), gateway.StdioTransport()); err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
	}
}
