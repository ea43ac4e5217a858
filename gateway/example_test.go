package gateway_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/policy"
)

// Embedding the gateway in a Go program: every ListTools and CallTool is
// decided by policy and logged, exactly as for clients over the wire. The
// program's main must call sandbox.Init() before anything else.
func Example() {
	cfg := &gateway.Config{
		Servers: []gateway.ServerConfig{{
			Name:        "files",
			Command:     "npx",
			Args:        []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"},
			Env:         map[string]string{"npm_config_cache": "/var/cache/mcp-warden/npm"},
			CallTimeout: 30 * time.Second,
			// The default policy exposes allow − block, and nothing without
			// an allow list.
			Tools: gateway.ToolFilter{Allow: []string{"read_*", "list_*"}, Block: []string{"read_media_file"}},
		}},
		DecisionLog: gateway.DecisionLogConfig{Path: "/var/log/mcp-warden/decisions.log"},
	}
	g, err := gateway.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close() // stops every server's whole process tree

	ctx := context.Background()
	if err := g.Start(ctx); err != nil {
		log.Fatal(err)
	}
	alice := policy.Principal{ID: "alice", Claims: map[string]any{"team": "research"}}
	tools, err := g.ListTools(ctx, alice)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name)
	}
	res, err := g.CallTool(ctx, alice, "files__read_text_file", map[string]any{"path": "/srv/shared/README"})
	if err != nil {
		log.Fatal(err) // an unknown or hidden tool
	}
	if res.IsError {
		fmt.Println("denied or failed:", res.Content)
	}
}
