// Package gateway is mcp-warden's MCP gateway: it starts the configured
// upstream servers confined, aggregates their tools, and serves them to
// clients (over stdio, streamable HTTP, or this Go API) with every tools/list
// exposure and every tools/call decided by policy and logged.
//
// A request travels: downstream face → Gateway.ListTools / Gateway.CallTool
// → policy.Decider (decide and log) → upstream server. The downstream faces
// are thin adapters over those two methods, so embedding the Gateway in Go
// goes through exactly the same enforcement as a client over the wire.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// Version is the gateway's version, reported to clients, to upstream
// servers and in every decision-log event.
var Version = "0.1.0-dev"

// Gateway aggregates upstream MCP servers behind policy. Create it with New,
// call Start once, serve with ListTools/CallTool or a downstream face, and
// Close it to stop every upstream process tree. Its methods are safe for
// concurrent use.
type Gateway struct {
	cfg     *Config
	logger  *slog.Logger
	decider *policy.Decider
	declog  *policy.DecisionLog
	metrics *metrics
	auth    *authenticator               // nil: HTTP clients are not authenticated
	envs    map[string]map[string]string // server name → environment
	envErrs map[string]error             // server name → why its environment could not be built

	mu        sync.RWMutex
	started   bool
	closed    bool
	upstreams []*upstream
	catalog   *catalog
	status    []ServerStatus
}

// ServerStatus reports how an upstream server's start went.
type ServerStatus struct {
	// Name is the configured server name.
	Name string
	// Running is true when the server is connected and its tools are listed.
	Running bool
	// Err says why the server is not running.
	Err error
	// Tools is the number of tools the server declared.
	Tools int
}

// Option adjusts how New builds a Gateway.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	policy    *rego.Policy
	logWriter io.Writer
}

// WithLogger sets the logger for operational messages (not decisions).
// The default discards them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithPolicy evaluates p instead of the policy named in the config.
func WithPolicy(p *rego.Policy) Option { return func(o *options) { o.policy = p } }

// WithDecisionLog writes decision events to w instead of the file named in
// the config.
func WithDecisionLog(w io.Writer) Option { return func(o *options) { o.logWriter = w } }

// New checks cfg, loads and prepares the policy and opens the decision log.
// It starts nothing: call Start.
func New(cfg *Config, opts ...Option) (*Gateway, error) {
	if cfg == nil {
		return nil, errors.New("gateway: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	g := &Gateway{cfg: cfg, logger: o.logger, envs: map[string]map[string]string{}, envErrs: map[string]error{}}

	var secrets []string
	for _, sc := range cfg.Servers {
		env, values, err := sc.Environment(os.LookupEnv)
		if err != nil {
			g.envErrs[sc.Name] = err
			continue
		}
		g.envs[sc.Name] = env
		secrets = append(secrets, values...)
	}

	p := o.policy
	if p == nil {
		var err error
		if p, err = loadPolicy(cfg.Policy); err != nil {
			return nil, err
		}
	}
	engine, err := policy.NewRegoEngine(context.Background(), p, PolicyData(cfg))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}

	rules, err := policy.NewLogRules(context.Background(), p, PolicyData(cfg))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	dl := cfg.DecisionLog
	logOpts := policy.DecisionLogOptions{
		Labels:       map[string]string{"id": instanceID(), "version": Version, "type": "mcp-warden"},
		Revision:     engine.Revision(),
		Redact:       secrets,
		Rules:        rules,
		Sync:         policy.SyncPolicy(dl.Fsync),
		SyncInterval: dl.FsyncInterval,
		MaxBytes:     dl.MaxBytes,
		FailOpen:     dl.OnError == "allow",
		Logger:       o.logger,
		Upload:       policy.UploadOptions{URL: dl.Upload.URL, BufferEvents: dl.Upload.BufferEvents, Interval: dl.Upload.Interval},
	}
	switch {
	case o.logWriter != nil:
		g.declog = policy.NewDecisionLog(o.logWriter, logOpts)
	case cfg.DecisionLog.Path != "":
		if g.declog, err = policy.OpenDecisionLog(cfg.DecisionLog.Path, logOpts); err != nil {
			return nil, err
		}
	default:
		g.declog = policy.NewDecisionLog(os.Stderr, logOpts)
	}
	g.decider = policy.NewDecider(engine, g.declog)
	g.metrics = newMetrics(g)
	if g.auth, err = newAuthenticator(cfg.Auth, o.logger); err != nil {
		_ = g.declog.Close()
		return nil, err
	}
	return g, nil
}

// withDefaults returns a copy of c with defaults applied, so that New never
// changes the caller's Config.
func (c *Config) withDefaults() *Config {
	d := *c
	d.Servers = append([]ServerConfig(nil), c.Servers...)
	d.Listeners = append([]ListenerConfig(nil), c.Listeners...)
	d.SetDefaults()
	return &d
}

// loadPolicy loads the configured policy, or the embedded default.
func loadPolicy(pc PolicyConfig) (*rego.Policy, error) {
	if pc.Path == "" {
		return rego.Default(), nil
	}
	p, err := rego.Load(pc.Path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return p, nil
}

// PolicyData is the data the gateway gives the policy: each server's allow
// and block lists under data.warden.servers.
func PolicyData(cfg *Config) map[string]any {
	servers := map[string]any{}
	for _, sc := range cfg.Servers {
		servers[sc.Name] = map[string]any{
			"allow": stringsAsAny(sc.Tools.Allow),
			"block": stringsAsAny(sc.Tools.Block),
		}
	}
	return map[string]any{"warden": map[string]any{"servers": servers}}
}

func stringsAsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Start starts every configured server in parallel, connects to it and lists
// its tools. A server that fails to start is reported in Status and logged;
// the others are served. Start fails only if no server could be started.
func (g *Gateway) Start(ctx context.Context) error {
	g.mu.Lock()
	if g.started || g.closed {
		g.mu.Unlock()
		return errors.New("gateway: Start called twice or after Close")
	}
	g.started = true
	g.mu.Unlock()

	results := make([]*upstream, len(g.cfg.Servers))
	status := make([]ServerStatus, len(g.cfg.Servers))
	var wg sync.WaitGroup
	for i, sc := range g.cfg.Servers {
		status[i].Name = sc.Name
		if err := g.envErrs[sc.Name]; err != nil {
			status[i].Err = err
			continue
		}
		wg.Go(func() {
			u, err := startUpstream(ctx, sc, g.envs[sc.Name], g.logger)
			if err != nil {
				status[i].Err = err
				return
			}
			results[i] = u
			status[i].Running, status[i].Tools = true, len(u.tools)
		})
	}
	wg.Wait()

	var running []*upstream
	var errs []error
	for i, u := range results {
		if u != nil {
			running = append(running, u)
			g.logger.Info("server started", "server", status[i].Name, "tools", status[i].Tools,
				"confinement", u.confinement.Level, "landlock", u.confinement.Landlock)
			if len(u.confinement.Missing) > 0 {
				g.logger.Warn("server runs less confined than asked", "server", status[i].Name,
					"confinement", u.confinement.Level, "missing", strings.Join(u.confinement.Missing, "; "))
			}
			continue
		}
		errs = append(errs, status[i].Err)
		g.logger.Error("server not started", "server", status[i].Name, "error", status[i].Err)
	}
	cat, notes := buildCatalog(running, g.cfg.Naming)
	for _, n := range notes {
		g.logger.Warn("tool not exposed", "detail", n)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	g.upstreams, g.catalog, g.status = running, cat, status
	if g.closed { // Close ran while starting: stop what was started
		g.closeUpstreamsLocked()
		return errors.New("gateway: closed during Start")
	}
	if len(running) == 0 && len(status) > 0 {
		return fmt.Errorf("gateway: no server could be started: %w", errors.Join(errs...))
	}
	return nil
}

// Status reports how each configured server's start went, in config order.
func (g *Gateway) Status() []ServerStatus {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return append([]ServerStatus(nil), g.status...)
}

// ListTools returns the tools principal may see, each decided by policy;
// the decisions are logged as one event before ListTools returns.
func (g *Gateway) ListTools(ctx context.Context, principal policy.Principal) ([]*mcp.Tool, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	if principal.Transport == "" {
		principal.Transport = TransportAPI
	}
	if principal.AuthMethod == "" {
		principal.AuthMethod = AuthNone
	}
	meta := requestMetaFrom(ctx)
	now := policy.Timestamp(time.Now())
	inputs := make([]policy.Input, len(cat.entries))
	for i, e := range cat.entries {
		inputs[i] = policy.Input{
			Action:    policy.ActionToolsList,
			Principal: principal,
			Server:    e.server,
			Tool:      e.input,
			RequestID: meta.requestID,
			SessionID: meta.sessionID,
			Time:      now,
		}
	}
	start := time.Now()
	decisions := g.decider.DecideExposure(ctx, inputs)
	g.metrics.observe(policy.ActionToolsList, start, decisions...)
	tools := []*mcp.Tool{}
	for i, d := range decisions {
		if d.Allow {
			tools = append(tools, cat.entries[i].exposedTool())
		}
	}
	return tools, nil
}

// CallTool calls the tool exposed as name for principal, after policy allows
// it; the decision is logged before CallTool returns. A tool that does not
// exist and a tool the policy hides from principal give the same
// *jsonrpc.Error (unknown tool); a call the policy denies on its arguments
// gives a result with IsError set and the policy's reason. The call is
// bounded by the server's call timeout.
func (g *Gateway) CallTool(ctx context.Context, principal policy.Principal, name string, args map[string]any) (*mcp.CallToolResult, error) {
	cat, err := g.currentCatalog()
	if err != nil {
		return nil, err
	}
	e, ok := cat.byName[name]
	if !ok {
		return nil, unknownToolError(name)
	}
	if principal.Transport == "" {
		principal.Transport = TransportAPI
	}
	if principal.AuthMethod == "" {
		principal.AuthMethod = AuthNone
	}
	meta := requestMetaFrom(ctx)
	start := time.Now()
	d := g.decider.Decide(ctx, policy.Input{
		Action:    policy.ActionToolsCall,
		Principal: principal,
		Server:    e.server,
		Tool:      e.input,
		Arguments: args,
		RequestID: meta.requestID,
		SessionID: meta.sessionID,
		Time:      policy.Timestamp(time.Now()),
	})
	g.metrics.observe(policy.ActionToolsCall, start, d)
	if !d.Allow {
		if d.Hidden {
			return nil, unknownToolError(name)
		}
		return toolError("denied by policy: " + d.Reason), nil
	}
	res, err := e.upstream.call(ctx, e.tool.Name, args)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return nil, rpcErr // the upstream's own protocol error, passed through
		}
		g.logger.Warn("tool call failed", "server", e.upstream.cfg.Name, "tool", e.tool.Name, "error", err)
		return toolError(fmt.Sprintf("tool %q failed: %v", name, err)), nil
	}
	return res, nil
}

// unknownToolError is the answer for a tool that does not exist or is hidden:
// the same error the MCP SDK gives for an unknown tool, so that hidden tools
// cannot be told apart from missing ones.
func unknownToolError(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func (g *Gateway) currentCatalog() (*catalog, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	switch {
	case g.closed:
		return nil, errors.New("gateway: closed")
	case g.catalog == nil:
		return nil, errors.New("gateway: not started")
	}
	return g.catalog, nil
}

// Close stops every upstream server (the whole process tree of each) and
// closes the decision log. It is idempotent.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	err := g.closeUpstreamsLocked()
	g.mu.Unlock()
	return errors.Join(err, g.declog.Close())
}

func (g *Gateway) closeUpstreamsLocked() error {
	var wg sync.WaitGroup
	errs := make([]error, len(g.upstreams))
	for i, u := range g.upstreams {
		wg.Go(func() { errs[i] = u.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// instanceID names this gateway process in decision-log labels.
func instanceID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
