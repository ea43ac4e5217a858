package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/rego"
)

type serveFlags struct {
	config      string
	agent       string
	demo        bool
	stdio       bool
	listen      string
	principal   string
	decisionLog string
	tls         gateway.ListenerTLSConfig
}

func serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway on a configuration file (YAML, or a Claude-Desktop style
mcpServers JSON), on the AGENT_<Name>_MCP_<N>_* environment variables (--agent),
or on the embedded demo (--demo). Without --stdio or --listen the listeners of
the configuration are used, and stdio when it names none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "configuration file (.yaml, .yml or .json)")
	fl.StringVar(&f.agent, "agent", "", "load servers from AGENT_<agent>_MCP_<N>_* environment variables")
	fl.BoolVar(&f.demo, "demo", false, "serve the embedded demo server with the demo policy")
	fl.BoolVar(&f.stdio, "stdio", false, "serve one client on standard input and output")
	fl.StringVar(&f.listen, "listen", "", "serve streamable HTTP at http://<address>/mcp (e.g. 127.0.0.1:8080)")
	fl.StringVar(&f.principal, "principal", "", "principal id of clients that present no credentials")
	fl.StringVar(&f.decisionLog, "decision-log", "", "append decision events to this file (default: from config, else stderr)")
	fl.StringVar(&f.tls.CertFile, "tls-cert", "", "serve HTTP over TLS with this PEM certificate (chain): tls.cert_file of the HTTP listeners")
	fl.StringVar(&f.tls.KeyFile, "tls-key", "", "the PEM private key of --tls-cert: tls.key_file")
	fl.StringVar(&f.tls.ClientCAFile, "tls-client-ca", "", "verify client certificates against these PEM CAs; a verified certificate names the principal (mTLS): tls.client_ca_file")
	fl.BoolVar(&f.tls.RequireClientCert, "tls-require-client-cert", false, "refuse, in the handshake, clients without a certificate from --tls-client-ca: tls.require_client_cert")
	fl.StringVar(&f.tls.ClientCRLFile, "tls-client-crl", "", "refuse client certificates revoked by these CRLs of the --tls-client-ca CAs (re-read when the file changes): tls.client_crl_file")
	cmd.MarkFlagsMutuallyExclusive("config", "agent", "demo")
	return cmd
}

// serveGCPercent is the garbage collector's GOGC for serve unless the
// environment sets one: the MCP SDK allocates tens of KiB per message
// decoded while the gateway's live heap stays a few MiB, so at the default
// 100 a collection runs every few calls and costs about as much CPU as
// everything else the gateway does (see RATIONALE.md, "Why serve runs the
// garbage collector at GOGC=400").
const serveGCPercent = 400

func runServe(ctx context.Context, f serveFlags) error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	cfg, opts, err := serveConfig(f)
	if err != nil {
		return err
	}
	if f.stdio || f.listen != "" {
		cfg.Listeners = nil
		if f.stdio {
			cfg.Listeners = append(cfg.Listeners, gateway.ListenerConfig{Stdio: true})
		}
		if f.listen != "" {
			cfg.Listeners = append(cfg.Listeners, gateway.ListenerConfig{HTTP: f.listen})
		}
	}
	if len(cfg.Listeners) == 0 {
		cfg.Listeners = []gateway.ListenerConfig{{Stdio: true}}
	}
	if err := applyTLSFlags(cfg, f.tls); err != nil {
		return err
	}
	if f.principal != "" {
		cfg.Principal.ID = f.principal
	}
	if f.decisionLog != "" {
		cfg.DecisionLog.Path = f.decisionLog
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)) // stdout may be the MCP channel
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	g, err := gateway.New(cfg, append(opts, gateway.WithLogger(logger))...)
	if err != nil {
		return err
	}
	defer g.Close()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := g.Start(ctx); err != nil {
		return err
	}
	if f.demo {
		fmt.Fprint(os.Stderr, demoUsage)
	}
	return g.Run(ctx)
}

// applyTLSFlags gives every HTTP listener (the --listen one, or those of
// the configuration) the TLS of the --tls-* flags, when any is set.
func applyTLSFlags(cfg *gateway.Config, t gateway.ListenerTLSConfig) error {
	if t == (gateway.ListenerTLSConfig{}) {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("serve: --tls-cert and --tls-key go together (and --tls-client-ca, --tls-require-client-cert need them)")
	}
	if t.RequireClientCert && t.ClientCAFile == "" {
		return errors.New("serve: --tls-require-client-cert needs --tls-client-ca, the CAs client certificates must chain to")
	}
	if t.ClientCRLFile != "" && t.ClientCAFile == "" {
		return errors.New("serve: --tls-client-crl needs --tls-client-ca, the CAs whose revocation lists it holds")
	}
	n := 0
	for i := range cfg.Listeners {
		if cfg.Listeners[i].HTTP != "" {
			tls := t
			cfg.Listeners[i].TLS = &tls
			n++
		}
	}
	if n == 0 {
		return errors.New("serve: --tls-* flags need an HTTP listener: add --listen ADDRESS (or listeners: - http: in the configuration)")
	}
	return nil
}

// serveConfig picks the configuration source named by the flags.
func serveConfig(f serveFlags) (*gateway.Config, []gateway.Option, error) {
	switch {
	case f.demo:
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("demo: locate own binary: %w", err)
		}
		return demoConfig(exe), []gateway.Option{gateway.WithPolicy(rego.Demo())}, nil
	case f.agent != "":
		cfg, err := gateway.ConfigFromAgentEnv(f.agent, os.Environ())
		return cfg, nil, err
	case f.config != "":
		cfg, err := gateway.LoadConfig(f.config)
		return cfg, nil, err
	}
	return nil, nil, errors.New("serve: say what to serve: --config FILE, --agent NAME or --demo")
}

// demoConfig is the embedded default: the demo server (this binary's
// demo-server command) with reset_notes hidden by its block list.
func demoConfig(exe string) *gateway.Config {
	return &gateway.Config{
		Servers: []gateway.ServerConfig{{
			Name:    "demo",
			Command: exe,
			Args:    []string{"demo-server"},
			Tools:   gateway.ToolFilter{Allow: []string{"*"}, Block: []string{"reset_notes"}},
		}},
		Naming:      gateway.NamingPrefix,
		DecisionLog: gateway.DecisionLogConfig{Path: "decisions.log"},
		Listeners:   []gateway.ListenerConfig{{HTTP: "127.0.0.1:8080"}},
		Principal:   gateway.PrincipalConfig{ID: "demo-user"},
	}
}

const demoUsage = `
mcp-warden demo: the demo server behind the demo policy, decisions in ./decisions.log
  MCP endpoint:  http://127.0.0.1:8080/mcp   (streamable HTTP)
  try it:        npx @modelcontextprotocol/inspector --cli http://127.0.0.1:8080/mcp --transport http --method tools/list
  tools:         demo__echo, demo__add, demo__read_note (try name=private/diary: denied by policy);
                 demo__reset_notes is hidden by policy
  stop:          Ctrl-C
`
