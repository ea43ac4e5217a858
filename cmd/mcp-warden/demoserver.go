package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/cmd/mcp-warden/internal/demoserver"
	"github.com/mcp-warden/mcp-warden/gateway"
)

func demoServerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "demo-server",
		Short:  "Run the demo MCP server on standard input and output",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Standard input through the poller, as serve --stdio reads it:
			// see gateway.StdioTransport.
			return demoserver.Run(cmd.Context(), gateway.StdioTransport().Reader, os.Stdout)
		},
	}
}
