package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

func policyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Test and evaluate Rego policy"}
	cmd.AddCommand(policyTestCommand(), policyEvalCommand())
	return cmd
}

func policyTestCommand() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test [path…]",
		Short: "Run Rego tests (test_* rules), as opa test does",
		Long: `Run the Rego unit tests found in the given files and directories (default: the
current directory), as opa test does. Exits non-zero when a test fails or a
file does not compile.`,
		RunE: func(cmd *cobra.Command, paths []string) error {
			if len(paths) == 0 {
				paths = []string{"."}
			}
			passed, failed, err := rego.Test(cmd.Context(), paths, cmd.OutOrStdout(), verbose)
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d tests failed", failed, passed+failed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every test")
	return cmd
}

func policyEvalCommand() *cobra.Command {
	var inputPath, policyPath, configPath, engineName string
	var showEvent bool
	cmd := &cobra.Command{
		Use:   "eval --input input.json",
		Short: "Print the decision for one input document",
		Long: `Evaluate data.mcp.warden.decision for an input document (see
policy/input.schema.json) and print the decision as JSON. The policy is the
embedded default unless --policy names a directory or bundle (with --engine
wasm, also a bundle built by opa build -t wasm); --config supplies the data the
gateway would (each server's tool allow and block lists) and its policy.engine
and policy.wasm settings, which --engine overrides. With --log the
decision-log event is printed to standard error too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := readInput(inputPath)
			if err != nil {
				return err
			}
			cfg := &gateway.Config{}
			if configPath != "" {
				if cfg, err = gateway.LoadConfig(configPath); err != nil {
					return err
				}
			}
			cfg.Policy.Path = policyPath
			if engineName != "" && engineName != cfg.Policy.Engine {
				cfg.Policy.Engine = engineName
				if engineName != policy.EngineWasm {
					cfg.Policy.Wasm = gateway.WasmConfig{}
				}
			}
			engine, err := gateway.NewPolicyEngine(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if c, ok := engine.(io.Closer); ok {
				defer c.Close()
			}
			logTo := io.Discard
			if showEvent {
				logTo = cmd.ErrOrStderr()
			}
			d := policy.NewDecider(engine, policy.NewDecisionLog(logTo, policy.DecisionLogOptions{Revision: engine.Revision()}))
			dec := d.Decide(cmd.Context(), in)
			out, err := json.MarshalIndent(dec.Result(), "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&inputPath, "input", "i", "", "input document (JSON file, - for standard input)")
	fl.StringVarP(&policyPath, "policy", "p", "", "policy directory or bundle (default: embedded)")
	fl.StringVarP(&configPath, "config", "c", "", "gateway configuration to take policy data from")
	fl.StringVar(&engineName, "engine", "", "rego or wasm (default: the configuration's policy.engine, else rego)")
	fl.BoolVar(&showEvent, "log", false, "also print the decision-log event to standard error")
	_ = cmd.MarkFlagRequired("input")
	return cmd
}

func readInput(path string) (policy.Input, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return policy.Input{}, fmt.Errorf("read input: %w", err)
	}
	var in policy.Input
	if err := json.Unmarshal(b, &in); err != nil {
		return policy.Input{}, fmt.Errorf("input %s: not an input document: %w", path, err)
	}
	return in, nil
}
