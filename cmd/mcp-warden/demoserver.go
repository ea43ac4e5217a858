package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/cmd/mcp-warden/internal/demoserver"
)

func demoServerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "demo-server",
		Short:  "Run the demo MCP server on standard input and output",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demoserver.Run(cmd.Context(), os.Stdin, os.Stdout)
		},
	}
}
