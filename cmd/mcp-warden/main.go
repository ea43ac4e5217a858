// Command mcp-warden is a hardened gateway for the Model Context Protocol:
// it runs MCP servers confined, aggregates their tools, and decides every
// tools/list exposure and tools/call with Rego policy, logging each decision.
//
// Usage:
//
//	mcp-warden serve --config gateway.yaml            # stdio by default
//	mcp-warden serve --config gateway.yaml --listen 127.0.0.1:8080
//	mcp-warden serve --agent Claude                   # AGENT_Claude_MCP_<N>_* variables
//	mcp-warden serve --demo                           # embedded demo server and policy
//	mcp-warden policy test [dir…]
//	mcp-warden policy eval --input input.json [--policy dir] [--config gateway.yaml]
//	mcp-warden audit verify decisions.log.* decisions.log
//	mcp-warden audit replay --config gateway.yaml decisions.log.* decisions.log
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/sandbox"
)

func main() {
	sandbox.Init() // must come first: runs the sandbox helper when re-executed as one
	if err := rootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-warden:", err)
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcp-warden",
		Short:         "A hardened gateway for the Model Context Protocol",
		Version:       gateway.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(), policyCommand(), auditCommand(), sandboxCommand(), demoServerCommand())
	return root
}
