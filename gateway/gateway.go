// Package gateway is mcp-warden's MCP gateway: it starts the configured
// upstream servers confined (or connects to remote ones), aggregates their
// tools, resources and prompts, and serves them to clients (over stdio,
// streamable HTTP in both protocol eras, HTTP+SSE, REST, or this Go API)
// with every list exposure, tools/call, resources/read and prompts/get
// decided by policy and logged.
//
// A request travels: downstream face → Gateway.ListTools / CallTool /
// ReadResource / GetPrompt … → policy.Decider (decide and log) → upstream
// server. The downstream faces are thin adapters over those methods, so
// embedding the Gateway in Go goes through exactly the same enforcement as a
// client over the wire.
package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/sandbox"
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
	warm    *warmRunner // runs decisions on grown stacks
	engine  policy.Engine
	declog  *policy.DecisionLog
	metrics *metrics
	auth    *authenticator               // nil: HTTP clients are not authenticated
	envs    map[string]map[string]string // server name → environment
	envErrs map[string]error             // server name → why its environment or headers could not be built
	// remoteHeaders are the headers sent to each remote server, secret
	// values read from the host included.
	remoteHeaders map[string]map[string]string
	// remoteProxies are the proxies of the remote servers reached through
	// one (see remoteHTTPClient).
	remoteProxies map[string]*remoteProxy
	// remoteRoots are the CAs of remote servers with a ca_file.
	remoteRoots map[string]*x509.CertPool

	// background runs work started by upstream notifications (re-listing);
	// Close waits for it.
	backgroundMu     sync.Mutex
	backgroundClosed bool
	background       sync.WaitGroup

	mu        sync.RWMutex
	started   bool
	closed    bool
	upstreams []*upstream
	catalog   *catalog
	status    []ServerStatus

	inflight     inflightCounter // forwarded requests, awaited by shutdown
	sessionCalls sessionCalls    // requests in flight per HTTP session, cancelled when it ends

	pool *sandbox.Pool // sandbox inits started ahead for stdio servers; nil: none

	supervisor supervisor // restarts exited stdio servers (restart.go); Close stops it

	facesMu sync.Mutex
	faces   []*mcp.Server // the downstream MCP servers, told about list changes

	listChanges listChangeRouting // which downstream session is owed which list_changed
	sessionEnds sessionEnds       // ends the resource subscriptions of sessions gone
	// subscriptions are the downstream resource subscriptions by server
	// name: they outlive a server's restart, which subscribes the new
	// process to them again. The map is fixed at New.
	subscriptions map[string]*resourceSubscriptions

	inputs *inputBridge // tools/call of 2026-07-28 clients held for their input (bridge.go)
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
	g := &Gateway{cfg: cfg, logger: o.logger, envs: map[string]map[string]string{}, envErrs: map[string]error{},
		remoteHeaders: map[string]map[string]string{}, remoteProxies: map[string]*remoteProxy{}, remoteRoots: map[string]*x509.CertPool{}}
	g.inputs = newInputBridge(cfg.InputRequests, o.logger)
	g.subscriptions = make(map[string]*resourceSubscriptions, len(cfg.Servers))
	for _, sc := range cfg.Servers {
		g.subscriptions[sc.Name] = &resourceSubscriptions{}
	}

	var secrets []string
	for _, sc := range cfg.Servers {
		env, values, err := sc.Environment(os.LookupEnv)
		if err != nil {
			g.envErrs[sc.Name] = err
			continue
		}
		g.envs[sc.Name] = env
		secrets = append(secrets, values...)
		if sc.URL != "" {
			headers, values, err := sc.remoteHeaders(nil, nil)
			if err != nil {
				g.envErrs[sc.Name] = err
				continue
			}
			g.remoteHeaders[sc.Name] = headers
			secrets = append(secrets, values...)
			proxy, err := newRemoteProxy(sc.Proxy)
			if err != nil {
				g.envErrs[sc.Name] = fmt.Errorf("server %q: %w", sc.Name, err)
				continue
			}
			if sc.CAFile != "" {
				roots, err := loadCAFile(sc.CAFile)
				if err != nil {
					g.envErrs[sc.Name] = fmt.Errorf("server %q: ca_file: %w", sc.Name, err)
					continue
				}
				g.remoteRoots[sc.Name] = roots
			}
			if proxy != nil {
				g.remoteProxies[sc.Name] = proxy
				if proxy.password != "" {
					secrets = append(secrets, proxy.password)
				}
				g.logger.Info("remote server reached through a proxy", "server", sc.Name, "proxy", proxy.shown)
			}
		}
	}

	engine, source, err := newEngine(context.Background(), cfg, o.policy)
	if err != nil {
		return nil, err
	}
	g.engine = engine

	// The drop and mask rules come from the Rego source; a prebuilt Wasm
	// bundle has none, so its events get the default mask.
	var rules *policy.LogRules
	if source != nil {
		if rules, err = policy.NewLogRules(context.Background(), source, PolicyData(cfg)); err != nil {
			if c, ok := engine.(io.Closer); ok {
				_ = c.Close()
			}
			return nil, fmt.Errorf("policy: %w", err)
		}
	}
	dl := cfg.DecisionLog
	upload := policy.UploadOptions{URL: dl.Upload.URL, BufferEvents: dl.Upload.BufferEvents, Interval: dl.Upload.Interval,
		MaxRecordBytes: dl.Upload.MaxRecordBytes, MaxPerSecond: dl.Upload.MaxDecisionsPerSecond}
	if f := dl.Upload.BearerTokenFile; f != "" && dl.Upload.URL != "" {
		b, err := os.ReadFile(f)
		token := strings.TrimSpace(string(b))
		if err == nil && token == "" {
			err = errors.New("the file is empty")
		}
		if err != nil {
			if c, ok := engine.(io.Closer); ok {
				_ = c.Close()
			}
			return nil, fmt.Errorf("decision_log.upload.bearer_token_file %s: %w", f, err)
		}
		upload.Authorization = "Bearer " + token
		secrets = append(secrets, token)
	}
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
		Upload:       upload,
	}
	switch {
	case o.logWriter != nil:
		g.declog = policy.NewDecisionLog(o.logWriter, logOpts)
	case cfg.DecisionLog.Path != "":
		if g.declog, err = policy.OpenDecisionLog(cfg.DecisionLog.Path, logOpts); err != nil {
			if c, ok := engine.(io.Closer); ok {
				_ = c.Close()
			}
			return nil, err
		}
	default:
		g.declog = policy.NewDecisionLog(os.Stderr, logOpts)
	}
	// Evaluations run on warm workers (warm.go); a cached decision and the
	// log write need no grown stack, and stay on the request's goroutine.
	g.warm = newWarmRunner()
	g.decider = policy.NewDecider(engine, g.declog, policy.WithEvaluationRunner(g.warm.run))
	g.metrics = newMetrics(g)
	if g.auth, err = newAuthenticator(cfg.Auth, cfg.verifiesClientCerts(), o.logger); err != nil {
		_ = g.declog.Close()
		g.warm.close()
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

// NewPolicyEngine prepares the policy engine cfg configures (policy.path,
// policy.engine, policy.wasm, and the data of its servers), as New does
// with the same options (WithPolicy; the others do not concern the
// engine): the same decisions the gateway would make. An engine that holds
// resources (the wasm engine) is an io.Closer.
func NewPolicyEngine(ctx context.Context, cfg *Config, opts ...Option) (policy.Engine, error) {
	if err := cfg.policyProblems(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	engine, _, err := newEngine(ctx, cfg.withDefaults(), o.policy)
	return engine, err
}

// newEngine prepares the configured engine on p, else on the configured
// policy, else on the embedded default, and returns the Rego source it was
// built from (nil for a prebuilt Wasm bundle). With the wasm engine, a
// configured path holding policy.wasm is run as built; Rego source is
// compiled first.
func newEngine(ctx context.Context, cfg *Config, p *rego.Policy) (policy.Engine, *rego.Policy, error) {
	data := PolicyData(cfg)
	if p == nil && cfg.Policy.Engine == policy.EngineWasm && cfg.Policy.Path != "" {
		wp, err := rego.LoadWasm(cfg.Policy.Path)
		switch {
		case err == nil:
			engine, err := policy.NewWasmEngine(ctx, wp, data, cfg.Policy.Wasm.options())
			if err != nil {
				return nil, nil, fmt.Errorf("policy: %w", err)
			}
			return engine, nil, nil
		case !errors.Is(err, rego.ErrNoWasmModule):
			return nil, nil, fmt.Errorf("policy: %w", err)
		}
	}
	if p == nil {
		var err error
		if p, err = loadPolicy(cfg.Policy); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Policy.Engine == policy.EngineWasm {
		wp, err := policy.CompileWasm(ctx, p)
		if err != nil {
			return nil, nil, fmt.Errorf("policy: %w", err)
		}
		engine, err := policy.NewWasmEngine(ctx, wp, data, cfg.Policy.Wasm.options())
		if err != nil {
			return nil, nil, fmt.Errorf("policy: %w", err)
		}
		return engine, p, nil
	}
	engine, err := policy.NewRegoEngine(ctx, p, data)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	return engine, p, nil
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
// and block lists under data.warden.servers (tools at the top, resources
// and prompts under their own keys).
func PolicyData(cfg *Config) map[string]any {
	servers := map[string]any{}
	for _, sc := range cfg.Servers {
		servers[sc.Name] = map[string]any{
			"allow":     stringsAsAny(sc.Tools.Allow),
			"block":     stringsAsAny(sc.Tools.Block),
			"resources": map[string]any{"allow": stringsAsAny(sc.Resources.Allow), "block": stringsAsAny(sc.Resources.Block)},
			"prompts":   map[string]any{"allow": stringsAsAny(sc.Prompts.Allow), "block": stringsAsAny(sc.Prompts.Block)},
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
	if hasStdioServer(g.cfg) {
		g.pool = sandbox.NewPool()
	}
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
			u, err := startUpstream(ctx, g, sc, g.envs[sc.Name])
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
				"confinement", u.confinement.Level, "landlock", u.confinement.Landlock, "modern", u.modern != nil)
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
		g.logger.Warn("not exposed", "detail", n)
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
	g.supervise(running)
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
	return exposed(ctx, g, principal, policy.ActionToolsList, cat.entries, fillTool, (*catalogEntry).exposedTool), nil
}

func fillTool(e *catalogEntry, in *policy.Input) { in.Server, in.Tool = e.server, e.input }

// exposed decides, as one logged list decision (action), which of items
// principal may see, and returns show(item) for each visible one, in order.
// fill sets an input's server and item.
func exposed[E, T any](ctx context.Context, g *Gateway, principal policy.Principal, action policy.Action,
	items []E, fill func(E, *policy.Input), show func(E) T) []T {
	out := []T{}
	if len(items) == 0 {
		return out
	}
	meta := requestMetaFrom(ctx)
	now := policy.Timestamp(time.Now())
	principal = principalDefaults(principal)
	inputs := make([]policy.Input, len(items))
	for i, item := range items {
		inputs[i] = policy.Input{Action: action, Principal: principal, RequestID: meta.requestID, SessionID: meta.sessionID, Time: now}
		fill(item, &inputs[i])
	}
	start := time.Now()
	var decisions []policy.Decision
	g.warm.run(func() { decisions = g.decider.DecideExposure(ctx, inputs) })
	g.metrics.observe(action, start, decisions...)
	for i, d := range decisions {
		if d.Allow {
			out = append(out, show(items[i]))
		}
	}
	return out
}

// principalDefaults completes a principal given through the Go API, which
// names no transport and was not authenticated by the gateway.
func principalDefaults(p policy.Principal) policy.Principal {
	if p.Transport == "" {
		p.Transport = TransportAPI
	}
	if p.AuthMethod == "" {
		p.AuthMethod = AuthNone
	}
	return p
}

// decide makes and logs one decision on in, completed with the request's
// principal, ids and time.
func (g *Gateway) decide(ctx context.Context, principal policy.Principal, in policy.Input) policy.Decision {
	meta := requestMetaFrom(ctx)
	in.Principal, in.RequestID, in.SessionID = principalDefaults(principal), meta.requestID, meta.sessionID
	start := time.Now()
	in.Time = policy.Timestamp(start)
	var d policy.Decision
	d = g.decider.Decide(ctx, in)
	g.metrics.observe(in.Action, start, d)
	if !d.Allow {
		// A retry the policy now denies ends the call held for it.
		g.inputs.drop(meta.requestState, principal)
	}
	return d
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
	d := g.decide(ctx, principal, policy.Input{Action: policy.ActionToolsCall, Server: e.server, Tool: e.input, Arguments: args})
	if !d.Allow {
		if d.Hidden {
			return nil, unknownToolError(name)
		}
		return toolError("denied by policy: " + d.Reason), nil
	}
	if args == nil {
		args = map[string]any{} // servers reject a null arguments object
	}
	call := func(ctx context.Context, u *upstream) (*mcp.CallToolResult, error) {
		return forward(ctx, u, func(ctx context.Context, s *mcp.ClientSession, meta mcp.Meta) (*mcp.CallToolResult, error) {
			down := requestMetaFrom(ctx)
			return s.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: e.tool.Name, Arguments: args,
				InputResponses: down.inputResponses, RequestState: down.requestState})
		})
	}
	res, err := forwardBridged(g, ctx, principal, e.upstream, bridgedRequest{method: "tools/call", name: name, args: args}, call)
	if err == nil {
		stripServerInfo(res)
	}
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
	return &unknownTool{&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}}
}

// unknownTool marks the unknown-tool error, so that faces with their own
// code for it (REST: -32601) can tell it from other invalid parameters.
type unknownTool struct{ rpc *jsonrpc.Error }

func (e *unknownTool) Error() string { return e.rpc.Error() }
func (e *unknownTool) Unwrap() error { return e.rpc }

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
	g.inputs.close()
	g.supervisor.stop()
	g.backgroundMu.Lock()
	g.backgroundClosed = true
	g.backgroundMu.Unlock()
	err := g.closeUpstreamsLocked()
	pool := g.pool
	g.mu.Unlock()
	if pool != nil {
		err = errors.Join(err, pool.Close())
	}
	g.background.Wait() // closed upstreams make their work end at once
	g.closeDownstreamSessions()
	g.sessionEnds.wait()
	g.warm.close()
	err = errors.Join(err, g.declog.Close())
	if c, ok := g.engine.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
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

// inBackground runs fn on its own goroutine unless the gateway is closed
// (then it reports false); Close waits for every such goroutine.
func (g *Gateway) inBackground(fn func()) bool {
	// Not g.mu: this runs on upstream read loops, which Close waits for
	// while holding g.mu.
	g.backgroundMu.Lock()
	defer g.backgroundMu.Unlock()
	if g.backgroundClosed {
		return false
	}
	g.background.Go(fn)
	return true
}

// instanceID names this gateway process in decision-log labels.
func instanceID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// upstreamError is what the client sees when a forwarded request fails: the
// server's own protocol error as it sent it, anything else (a timeout, a
// broken connection) as an internal error naming the server.
func upstreamError(u *upstream, err error) error {
	if err == nil {
		return nil
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return rpcErr
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("server %q: %v", u.cfg.Name, err)}
}

// stripServerInfo removes the upstream's self-description from a result:
// the client talks to the gateway, which adds its own.
func stripServerInfo(res mcp.Result) {
	if res == nil {
		return
	}
	if m := res.GetMeta(); m != nil {
		delete(m, mcp.MetaKeyServerInfo)
		if len(m) == 0 {
			res.SetMeta(nil)
		}
	}
}

// upstreamChanged re-lists what changed on u, rebuilds the catalog (so every
// later list is decided afresh by policy) and tells the downstream clients
// whose lists changed — by policy, for their principal — that they did.
func (g *Gateway) upstreamChanged(u *upstream, tools, resources, prompts bool) {
	if u.instance || !u.ready.Load() {
		return // the catalog follows the listing instance only
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := u.refresh(ctx, tools, resources, prompts); err != nil {
		g.logger.Warn("re-list after list_changed failed", "server", u.cfg.Name, "error", err)
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	before, cat := g.rebuildCatalogLocked()
	u.mu.RLock()
	n := len(u.tools)
	u.mu.RUnlock()
	for _, st := range g.status {
		if st.Name == u.cfg.Name {
			st.Tools = n
			g.setStatusLocked(st)
			break
		}
	}
	g.mu.Unlock()
	g.logger.Info("upstream lists changed", "server", u.cfg.Name, "tools", tools, "resources", resources, "prompts", prompts)
	g.tellListsChanged(ctx, before, cat, listAnnouncement{server: u.cfg.Name, event: announcedListChanged, from: u,
		tools: tools, resources: resources, prompts: prompts})
}

// addDownstreamServer records a downstream MCP server, to be told about
// list changes; the returned func forgets it.
func (g *Gateway) addDownstreamServer(s *mcp.Server) {
	g.facesMu.Lock()
	defer g.facesMu.Unlock()
	g.faces = append(g.faces, s)
}

func (g *Gateway) forgetDownstreamServer(s *mcp.Server) {
	g.facesMu.Lock()
	defer g.facesMu.Unlock()
	if i := slices.Index(g.faces, s); i >= 0 {
		g.faces = slices.Delete(g.faces, i, i+1)
	}
}

func (g *Gateway) downstreamServers() []*mcp.Server {
	g.facesMu.Lock()
	defer g.facesMu.Unlock()
	return slices.Clone(g.faces)
}

// closeDownstreamSessions ends every downstream client session (HTTP
// sessions outlive their connections until they time out).
func (g *Gateway) closeDownstreamSessions() {
	for _, s := range g.downstreamServers() {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	}
}
