package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/policy"
)

func auditCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Check decision logs"}
	cmd.AddCommand(auditVerifyCommand(), auditReplayCommand())
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

type replayFlags struct {
	config, agent   string
	demo            bool
	strict          bool
	requireRevision bool
	noVerify        bool
}

func auditReplayCommand() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay --config gateway.yaml <file>…",
		Short: "Decide every logged decision again and report those that differ",
		Long: `Decide every decision of decision-log files again, with the policy and data the
gateway loads from --config (or --agent, or the embedded demo with --demo),
and report each decision whose outcome differs from the logged one, as
file:line, decision id, action, item, principal, logged and replayed result.
The last line counts the decisions: replayed, same, differ, not replayable.

Inputs are rebuilt from the events (each item of a list from the list's event,
a repeated list from the list it names); non-deterministic builtins
(time.now_ns, rand.intn…) return what the event's nd_builtin_cache recorded.
A decision is not replayable when the log's mask removed a part of its input
the policy reads (by default: the arguments), or its result; it is reported
with the reason. Replay evaluates with the rego engine whatever
policy.engine says (both engines decide alike). Events logged with another
policy revision are counted per file and replayed all the same.

The hash chain is verified first (as audit verify --continues does); use
audit verify for --includes. Exits non-zero when a decision differs, on a
malformed log or a policy that does not load; with --strict also when a
decision is not replayable, with --require-revision when an event was logged
with another policy revision.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error { return runReplay(cmd, f, files) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "the gateway configuration whose policy and data to replay with")
	fl.StringVar(&f.agent, "agent", "", "replay with the configuration of AGENT_<agent>_MCP_<N>_* environment variables")
	fl.BoolVar(&f.demo, "demo", false, "replay with the embedded demo's policy and data (serve --demo)")
	fl.BoolVar(&f.strict, "strict", false, "fail when a decision is not replayable")
	fl.BoolVar(&f.requireRevision, "require-revision", false, "fail when an event was logged with another policy revision")
	fl.BoolVar(&f.noVerify, "no-verify", false, "do not verify the hash chain first")
	cmd.MarkFlagsMutuallyExclusive("config", "agent", "demo")
	return cmd
}

func runReplay(cmd *cobra.Command, f replayFlags, files []string) error {
	if f.config == "" && f.agent == "" && !f.demo {
		return errors.New("replay: say which policy and data to replay with: --config FILE, --agent NAME or --demo")
	}
	// The configuration and policy serve would load, evaluated with the
	// rego engine.
	cfg, opts, err := serveConfig(serveFlags{config: f.config, agent: f.agent, demo: f.demo})
	if err != nil {
		return err
	}
	configured := cfg.Policy.Engine
	cfg.Policy.Engine, cfg.Policy.Wasm = policy.EngineRego, gateway.WasmConfig{}
	engine, err := gateway.NewPolicyEngine(cmd.Context(), cfg, opts...)
	if err != nil {
		if configured == policy.EngineWasm {
			return fmt.Errorf("replay evaluates with the rego engine, from the policy's Rego source: %w", err)
		}
		return err
	}
	out := cmd.OutOrStdout()
	if !f.noVerify {
		s, err := policy.VerifyDecisionLog(files, false)
		if p := (*policy.LogProblem)(nil); errors.As(err, &p) {
			return fmt.Errorf("decision log tampered: %w", p)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "chain ok: %d records in %d files\n", s.Records, s.Files)
	}
	s, err := policy.ReplayDecisionLog(cmd.Context(), engine, files, func(finding policy.ReplayFinding) { fmt.Fprintln(out, finding) })
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	printReplaySummary(out, s)
	var failed []error
	if s.Differ > 0 {
		failed = append(failed, fmt.Errorf("%d decisions differ", s.Differ))
	}
	if f.strict && s.NotReplayable > 0 {
		failed = append(failed, fmt.Errorf("%d decisions are not replayable (--strict)", s.NotReplayable))
	}
	if f.requireRevision && len(s.OtherRevisions) > 0 {
		failed = append(failed, fmt.Errorf("events were logged with another policy revision than %s (--require-revision)", s.Revision))
	}
	if len(failed) > 0 {
		return fmt.Errorf("replay: %w", errors.Join(failed...))
	}
	return nil
}

// printReplaySummary writes the revisions that differ, then the counts as
// the last line.
func printReplaySummary(out io.Writer, s policy.ReplaySummary) {
	for _, r := range s.OtherRevisions {
		logged := "no policy revision"
		if r.Revision != "" {
			logged = "policy revision " + r.Revision
		}
		fmt.Fprintf(out, "%s: %d events logged with %s, replayed with revision %s\n", r.File, r.Events, logged, s.Revision)
	}
	fmt.Fprintf(out, "%d decisions of %d events replayed: %d same, %d differ, %d not replayable\n",
		s.Decisions, s.Events, s.Same, s.Differ, s.NotReplayable)
}
