// Command relay is the floor for mcp-warden's proxy benchmark: the least a
// go-sdk MCP hop can do. It serves stdio and passes tools/list and
// tools/call straight to one stdio upstream (the command line after its
// own name), with no policy, no decision log, no renaming, no progress or
// cancellation routing: what one go-sdk server session plus one go-sdk
// client session cost per call on this machine.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/gateway"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: relay COMMAND [ARG...]")
	}
	debug.SetGCPercent(400) // as mcp-warden serve sets it, so that the floor runs as the gateway does
	ctx := context.Background()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "relay"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: exec.Command(os.Args[1], os.Args[2:]...)}, nil)
	if err != nil {
		log.Fatalf("relay: connect upstream: %v", err)
	}
	defer up.Close()
	s := mcp.NewServer(&mcp.Implementation{Name: "relay"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.ListToolsRequest:
				return up.ListTools(ctx, &mcp.ListToolsParams{Cursor: r.Params.Cursor})
			case *mcp.CallToolRequest:
				return up.CallTool(ctx, &mcp.CallToolParams{Name: r.Params.Name, Arguments: r.Params.Arguments})
			}
			return next(ctx, method, req)
		}
	})
	// Standard input as mcp-warden serve --stdio reads it (see
	// gateway.StdioTransport): the floor must not hang where the gateway does not.
	if err := s.Run(ctx, gateway.StdioTransport()); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
	}
}
