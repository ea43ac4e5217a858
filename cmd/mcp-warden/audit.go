package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/policy"
)

func auditCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Check decision logs"}
	cmd.AddCommand(auditVerifyCommand())
	return cmd
}

func auditVerifyCommand() *cobra.Command {
	var continues bool
	var kept []string
	cmd := &cobra.Command{
		Use:   "verify <file>…",
		Short: "Verify the hash chain of decision-log files",
		Long: `Verify that decision-log files, oldest first (rotated files, then the
active one: mcp-warden audit verify decisions.log.* decisions.log), form one
unbroken hash chain. The first edited, deleted, reordered or truncated record
is reported by file and line, and the command exits non-zero. With
--continues the first file may continue a chain whose older files were
removed (retention); otherwise it must start the chain.

Records deleted from the end of the newest file leave no gap in the chain:
keep the last hash this command prints somewhere the gateway's host cannot
change, and pass it next time with --includes; a chain that no longer
contains it was cut.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			s, err := policy.VerifyDecisionLog(files, !continues, kept...)
			if p := (*policy.LogProblem)(nil); errors.As(err, &p) {
				return fmt.Errorf("decision log tampered: %w", p)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d records in %d files form one chain; last hash %s\n", s.Records, s.Files, s.LastHash)
			return nil
		},
	}
	cmd.Flags().BoolVar(&continues, "continues", false, "the first file may continue an earlier chain")
	cmd.Flags().StringSliceVar(&kept, "includes", nil, "a record hash an earlier verification printed, which the chain must still contain (repeatable)")
	return cmd
}
