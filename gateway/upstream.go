package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/sandbox"
)

// startTimeout bounds spawning an upstream, its MCP handshake and its first
// listings. A server that has not answered by then is reported failed.
const startTimeout = 30 * time.Second

// discoverTimeout bounds the 2026-07-28 discovery probe: a legacy stdio
// server may never answer server/discover, and is then started again and
// spoken to in the legacy era.
const discoverTimeout = 5 * time.Second

// The two protocol eras (see RATIONALE.md, "Two eras upstream").
const (
	legacyProtocolVersion = "2025-11-25"
	modernProtocolVersion = "2026-07-28"
)

// upstream is one running, connected upstream server.
//
// It is spoken to over up to two links: legacy (initialize, a session,
// server→client requests) always, and modern (stateless 2026-07-28, MRTR)
// when the server speaks it. A downstream request goes over the link of its
// own era, so that sampling and elicitation reach legacy clients as
// requests and modern clients as input_required results.
type upstream struct {
	cfg           ServerConfig
	g             *Gateway
	legacy        *link
	modern        *link // nil: the server speaks no 2026-07-28
	confinement   policy.Confinement
	calls         callRegistry
	rootsAudience rootsAudience // downstream sessions told of root changes (roots.go)
	// instances are the per-principal instances of a server configured
	// with instances.per: principal (instances.go), held by its listing
	// upstream; nil otherwise. instance is set on each such instance, and
	// ended is closed when one of an instance's sessions ends.
	instances *principalInstances
	instance  bool
	ended     chan struct{}
	// ready is set once start-up has assigned the links and listed the
	// server: list_changed notifications before that are covered by the
	// start-up listing and must not touch half-built links.
	ready atomic.Bool

	mu        sync.RWMutex // guards the listings below, replaced on list_changed
	caps      *mcp.ServerCapabilities
	tools     []*mcp.Tool
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
	prompts   []*mcp.Prompt

	closeOnce sync.Once
	closeErr  error
}

// link is one MCP client session with the server: over the stdio of a
// confined process, or over HTTP to a remote server.
type link struct {
	proc       *sandbox.Process   // nil for a remote server
	stderr     *lineLogger        // nil for a remote server
	stopStream context.CancelFunc // ends a remote HTTP+SSE server's stream; nil otherwise
	session    *mcp.ClientSession
	client     *mcp.Client    // the session's client, which announces root changes
	relayed    relayedCounter // log and progress notifications read but not yet relayed
}

// streamTransport connects its transport under ctx instead of the
// caller's context.
type streamTransport struct {
	mcp.Transport
	ctx context.Context
}

func (t streamTransport) Connect(context.Context) (mcp.Connection, error) {
	return t.Transport.Connect(t.ctx)
}

func (l *link) modern() bool {
	r := l.session.InitializeResult()
	return r != nil && r.ProtocolVersion >= modernProtocolVersion
}

// startUpstream starts the server (or reaches the remote one), learns which
// eras it speaks, and lists what it offers. On any failure everything
// started is stopped before returning.
func startUpstream(ctx context.Context, g *Gateway, sc ServerConfig, env map[string]string) (_ *upstream, err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	u := &upstream{cfg: sc, g: g, calls: callRegistry{streamKey: newStreamKey()}}
	defer func() {
		if err != nil {
			_ = u.close()
		}
	}()

	// Probe for the modern era first; a server that answers with the legacy
	// era (or not at all) gets a legacy link only.
	probeCtx, stopProbe := context.WithTimeout(ctx, discoverTimeout)
	first, err := u.connect(probeCtx, env, modernProtocolVersion)
	stopProbe()
	switch {
	case err != nil && ctx.Err() == nil && !errors.Is(err, errServerExited):
		g.logger.Info("no answer to the 2026-07-28 probe; speaking 2025-11-25", "server", sc.Name, "error", err)
		if u.legacy, err = u.connect(ctx, env, legacyProtocolVersion); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case first.modern():
		u.modern = first
		if u.legacy, err = u.connect(ctx, env, legacyProtocolVersion); err != nil {
			return nil, err
		}
	default:
		u.legacy = first
	}
	if u.legacy.proc != nil {
		u.confinement = confinementOf(u.legacy.proc.Confinement())
	}
	if err := u.refresh(ctx, true, true, true); err != nil {
		return nil, fmt.Errorf("server %q: %w", sc.Name, u.legacy.cause(err))
	}
	if sc.Instances.perPrincipal() {
		u.instances = newPrincipalInstances(u)
	}
	u.ready.Store(true)
	if caps := u.capabilities(); caps.Logging != nil {
		// Everything is forwarded; each downstream session filters at its own level.
		_ = u.legacy.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"})
	}
	return u, nil
}

var errServerExited = errors.New("server exited during start-up")

// connect starts one link: spawns the server confined (or dials the remote
// one) and runs the handshake of the era of version.
func (u *upstream) connect(ctx context.Context, env map[string]string, version string) (*link, error) {
	sc := u.cfg
	l := &link{}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-warden", Version: Version}, u.clientOptions(l))
	client.AddReceivingMiddleware(u.relayRequests(l))
	l.client = client
	var t mcp.Transport
	if sc.URL != "" {
		hc := remoteHTTPClient(sc, u.g.remoteHeaders[sc.Name], u.g.remoteProxies[sc.Name], u.g.remoteRoots[sc.Name])
		if sc.Transport == RemoteSSE {
			// The SSE transport reads the whole session from the GET it
			// makes in Connect, under Connect's context: the link, not the
			// start-up deadline, must say when it ends (a start that runs
			// out of time still ends it).
			streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
			l.stopStream = stopStream
			defer context.AfterFunc(ctx, stopStream)()
			t = countingTransport{Transport: streamTransport{Transport: &mcp.SSEClientTransport{Endpoint: sc.URL, HTTPClient: hc}, ctx: streamCtx},
				relayed: &l.relayed}
		} else {
			hc.Transport = streamHTTP{next: hc.Transport, relayed: &l.relayed, key: u.calls.streamKey}
			t = &mcp.StreamableClientTransport{Endpoint: sc.URL, HTTPClient: hc}
		}
	} else {
		l.stderr = newLineLogger(u.g.logger.With("server", sc.Name), "upstream stderr")
		proc, err := u.g.spawn(ctx, sandbox.Spec{
			Name: sc.Name, Command: sc.Command, Args: sc.Args, Dir: sc.Cwd, Env: env, Stderr: l.stderr, Profile: sc.Sandbox,
		})
		if err != nil {
			_ = l.stderr.Close()
			return nil, err
		}
		l.proc = proc
		t = countingTransport{Transport: &mcp.IOTransport{Reader: proc.Stdout(), Writer: proc.Stdin()}, relayed: &l.relayed}
		// A server that exits during the handshake must fail it at once,
		// not after the timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-proc.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	var err error
	l.session, err = client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		err = l.cause(err)
		_ = l.close()
		return nil, fmt.Errorf("server %q: MCP handshake: %w", sc.Name, err)
	}
	return l, nil
}

// clientOptions routes what the server sends on its own — notifications
// and requests — to the gateway and to the downstream client whose call
// caused them.
func (u *upstream) clientOptions(l *link) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		// The downstream client answers input requests: pass them through.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		// Notification handlers run on the session's read loop: re-listing
		// from there would deadlock, so it runs on its own goroutine.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.g.inBackground(func() { u.g.upstreamChanged(u, true, false, false) })
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			u.g.inBackground(func() { u.g.upstreamChanged(u, false, true, false) })
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			u.g.inBackground(func() { u.g.upstreamChanged(u, false, false, true) })
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if u.instance {
				return // subscriptions are held by the listing instance, for every subscriber
			}
			u.g.resourceUpdated(ctx, req.Params)
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			defer l.relayed.done()
			u.calls.progress(ctx, req.Params, l.proc)
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			defer l.relayed.done()
			u.calls.log(ctx, req.Params, l.proc)
		},
		// These declare the capabilities; relayRequests answers the requests.
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return u.calls.createMessage(ctx, req.Params, l.proc)
		},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return u.calls.elicit(ctx, req.Params, l.proc)
		},
	}
}

// relayRequests hands the server's sampling, elicitation and roots requests
// arriving on l to the client they are for, untouched: the SDK's own
// handling would first check them against its own reading of the schema
// rules, and the client, not the gateway, is the one to judge them.
func (u *upstream) relayRequests(l *link) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.ElicitRequest:
				return u.calls.elicit(ctx, r.Params, l.proc)
			case *mcp.CreateMessageRequest:
				return u.calls.createMessage(ctx, r.Params, l.proc)
			case *mcp.ListRootsRequest:
				return u.calls.listRoots(ctx, r.Params, l.proc)
			}
			return next(ctx, method, req)
		}
	}
}

// collect follows a paginated list to its end.
func collect[T any](method string, pages iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for item, err := range pages {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		out = append(out, item)
	}
	return out, nil
}

// refresh re-lists what the server offers: its tools, resources and
// resource templates, and prompts, as asked.
func (u *upstream) refresh(ctx context.Context, tools, resources, prompts bool) error {
	s := u.legacy.session
	caps := s.InitializeResult().Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}
	var (
		ts  []*mcp.Tool
		rs  []*mcp.Resource
		rts []*mcp.ResourceTemplate
		ps  []*mcp.Prompt
		err error
	)
	if tools && caps.Tools != nil {
		if ts, err = collect("tools/list", s.Tools(ctx, nil)); err != nil {
			return err
		}
	}
	if resources && caps.Resources != nil {
		if rs, err = collect("resources/list", s.Resources(ctx, nil)); err != nil {
			return err
		}
		if rts, err = collect("resources/templates/list", s.ResourceTemplates(ctx, nil)); err != nil {
			return err
		}
	}
	if prompts && caps.Prompts != nil {
		if ps, err = collect("prompts/list", s.Prompts(ctx, nil)); err != nil {
			return err
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.caps = caps
	if tools {
		u.tools = ts
	}
	if resources {
		u.resources, u.templates = rs, rts
	}
	if prompts {
		u.prompts = ps
	}
	return nil
}

func (u *upstream) capabilities() *mcp.ServerCapabilities {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.caps
}

// linkFor is the link a downstream request of the given era goes over.
func (u *upstream) linkFor(modern bool) *link {
	if modern && u.modern != nil {
		return u.modern
	}
	return u.legacy
}

// callTimeout bounds every request forwarded to the server.
func (u *upstream) callTimeout() time.Duration {
	if u.cfg.CallTimeout > 0 {
		return u.cfg.CallTimeout
	}
	return DefaultCallTimeout
}

// forward sends one downstream request over the link of its era, bounded by
// the call timeout, with the downstream request registered so that
// progress, logging, sampling and elicitation find their way back. send
// receives the session and the _meta to send.
func forward[R any](ctx context.Context, u *upstream, send func(context.Context, *mcp.ClientSession, mcp.Meta) (R, error)) (R, error) {
	m := requestMetaFrom(ctx)
	l := u.linkFor(m.modern)
	ctx, cancel := context.WithTimeout(ctx, u.callTimeout())
	defer cancel()
	if err := u.downError(nil); err != nil {
		var zero R
		return zero, err
	}
	u.g.inflight.add()
	defer u.g.inflight.done()
	id, done := u.calls.begin(m, l.proc)
	defer done()
	ctx = context.WithValue(ctx, streamCallKey{}, id)
	if !m.modern {
		u.rootsAudience.add(m.session, u.g.liveSessions)
	}
	res, err := send(ctx, l.session, upstreamMeta(m, l.modern(), id))
	if err != nil {
		err = u.downError(err)
	}
	// The SDK hands notifications to their handlers behind the response
	// that followed them: let those relay before the client gets the
	// result, as the server sent them.
	l.relayed.wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		var zero R
		return zero, fmt.Errorf("server %q did not answer within %s", u.cfg.Name, u.callTimeout())
	}
	return res, err
}

// upstreamMeta is the _meta sent upstream for a downstream request: the
// gateway's own progress token for the client's, and for a modern link the
// client's capabilities and log level (the server decides what it may ask
// for on them); nothing else of the client's _meta.
func upstreamMeta(m requestMeta, modernLink bool, id string) mcp.Meta {
	out := mcp.Meta{}
	if m.progressToken != nil {
		out["progressToken"] = id
	}
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		if v, ok := m.meta[k]; ok {
			out[k] = v
		}
	}
	if modernLink && m.modern {
		for _, k := range []string{mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel} {
			if v, ok := m.meta[k]; ok {
				out[k] = v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// close ends the sessions and stops the process trees. It is idempotent.
func (u *upstream) close() error {
	u.closeOnce.Do(func() {
		var errs []error
		if u.instances != nil {
			errs = append(errs, u.instances.close())
		}
		for _, l := range []*link{u.modern, u.legacy} {
			if l != nil {
				errs = append(errs, l.close())
			}
		}
		u.closeErr = errors.Join(errs...)
	})
	return u.closeErr
}

func (l *link) close() error {
	var errs []error
	if l.session != nil {
		// Closing the session closes the server's stdin, the first step
		// of the stop sequence.
		if err := l.session.Close(); err != nil && !errors.Is(err, io.EOF) && l.proc != nil {
			errs = append(errs, err)
		}
	}
	if l.proc != nil {
		if err := l.proc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if l.stderr != nil {
		_ = l.stderr.Close()
	}
	if l.stopStream != nil {
		l.stopStream()
	}
	return errors.Join(errs...)
}

// exitGrace is how long a failed handshake waits to learn whether the
// server exited, so that the error names the exit rather than the EOF it
// caused.
const exitGrace = time.Second

// cause explains a failed start: a server that exited is named as such
// (with its status) rather than by the transport error its exit caused.
func (l *link) cause(err error) error {
	if l.proc == nil {
		return err
	}
	select {
	case <-l.proc.Done():
		status := "status 0"
		if werr := l.proc.Wait(); werr != nil {
			status = werr.Error()
		}
		return fmt.Errorf("%w (%s): %w", errServerExited, status, err)
	case <-time.After(exitGrace):
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (%w)", startTimeout, err)
	}
	return err
}

// alive reports whether the server is still there: for confined
// processes, that neither link's has exited; a remote server counts as
// alive while its session is open.
func (u *upstream) alive() bool {
	if u.legacy == nil {
		return false
	}
	for _, l := range []*link{u.legacy, u.modern} {
		if l == nil || l.proc == nil {
			continue
		}
		select {
		case <-l.proc.Done():
			return false
		default:
		}
	}
	return true
}

func confinementOf(c sandbox.Confinement) policy.Confinement {
	return policy.Confinement{
		ProcessGroup:         c.ProcessGroup,
		PIDNamespace:         c.PIDNamespace,
		ParentDeathSignal:    c.ParentDeathSignal,
		EnvironmentInherited: c.EnvironmentInherited,
		Level:                c.Level,
		UserNamespace:        c.UserNamespace,
		MountNamespace:       c.MountNamespace,
		NetworkNamespace:     c.NetworkNamespace,
		IPCNamespace:         c.IPCNamespace,
		UTSNamespace:         c.UTSNamespace,
		Landlock:             c.Landlock,
		Seccomp:              c.Seccomp,
		NoNewPrivs:           c.NoNewPrivs,
		CapabilitiesDropped:  c.CapabilitiesDropped,
		Cgroup:               c.Cgroup,
		Network:              c.Network,
		Missing:              c.Missing,
	}
}

// lineLogger is an io.Writer that logs each line written to it.
type lineLogger struct {
	pw *io.PipeWriter
}

func newLineLogger(logger *slog.Logger, msg string) *lineLogger {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			logger.Info(msg, "line", sc.Text())
		}
		_ = pr.CloseWithError(sc.Err())
	}()
	return &lineLogger{pw: pw}
}

func (l *lineLogger) Write(p []byte) (int, error) { return l.pw.Write(p) }

// Close ends the logging goroutine.
func (l *lineLogger) Close() error { return l.pw.Close() }
