package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/sandbox"
)

// startTimeout bounds spawning an upstream, its MCP handshake and its first
// tools/list. A server that has not answered by then is reported failed.
const startTimeout = 30 * time.Second

// upstreamProtocolVersion is the version offered to upstream servers. It is
// the last version with an initialize handshake, which every server in use
// speaks; offering it avoids the discovery probe that silent legacy stdio
// servers never answer.
const upstreamProtocolVersion = "2025-11-25"

// upstream is one running, connected upstream server.
type upstream struct {
	cfg         ServerConfig
	proc        *sandbox.Process
	session     *mcp.ClientSession
	tools       []*mcp.Tool
	confinement policy.Confinement
	stderr      *lineLogger

	closeOnce sync.Once
	closeErr  error
}

// startUpstream spawns the server confined, connects to it over its stdio
// and lists its tools (following pagination). On any failure the process is
// stopped before returning.
func startUpstream(ctx context.Context, sc ServerConfig, env map[string]string, logger *slog.Logger) (_ *upstream, err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	stderr := newLineLogger(logger.With("server", sc.Name), "upstream stderr")
	proc, err := sandbox.Spawn(ctx, sandbox.Spec{
		Name:    sc.Name,
		Command: sc.Command,
		Args:    sc.Args,
		Dir:     sc.Cwd,
		Env:     env,
		Stderr:  stderr,
		Profile: sc.Sandbox,
	})
	if err != nil {
		_ = stderr.Close()
		return nil, err
	}
	u := &upstream{cfg: sc, proc: proc, confinement: confinementOf(proc.Confinement()), stderr: stderr}
	defer func() {
		if err != nil {
			_ = u.close()
		}
	}()

	// A server that exits during the handshake must fail the start at once,
	// not after the timeout.
	go func() {
		select {
		case <-proc.Done():
			cancel()
		case <-ctx.Done():
		}
	}()

	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-warden", Version: Version}, nil)
	u.session, err = client.Connect(ctx, &mcp.IOTransport{Reader: proc.Stdout(), Writer: proc.Stdin()},
		&mcp.ClientSessionOptions{ProtocolVersion: upstreamProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("server %q: MCP handshake: %w", sc.Name, startCause(err, proc))
	}
	for t, err := range u.session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("server %q: tools/list: %w", sc.Name, startCause(err, proc))
		}
		u.tools = append(u.tools, t)
	}
	return u, nil
}

// exitGrace is how long a failed handshake waits to learn whether the
// server exited, so that the error names the exit rather than the EOF it
// caused.
const exitGrace = time.Second

// startCause explains a failed start: a server that exited is named as such
// (with its status) rather than by the transport error its exit caused.
func startCause(err error, proc *sandbox.Process) error {
	select {
	case <-proc.Done():
		status := "status 0"
		if werr := proc.Wait(); werr != nil {
			status = werr.Error()
		}
		return fmt.Errorf("server exited during start-up (%s): %w", status, err)
	case <-time.After(exitGrace):
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (%w)", startTimeout, err)
	}
	return err
}

// call forwards one tools/call, bounded by the server's call timeout.
func (u *upstream) call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	timeout := u.cfg.CallTimeout
	if timeout == 0 {
		timeout = DefaultCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if args == nil {
		args = map[string]any{} // servers reject a null arguments object
	}
	res, err := u.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("server %q did not answer within %s", u.cfg.Name, timeout)
	}
	return res, err
}

// alive reports whether the server's process is still running.
func (u *upstream) alive() bool {
	select {
	case <-u.proc.Done():
		return false
	default:
		return true
	}
}

// close ends the MCP session and stops the process tree. It is idempotent.
func (u *upstream) close() error {
	u.closeOnce.Do(func() {
		var errs []error
		if u.session != nil {
			// Closing the session closes the server's stdin, the first step
			// of the stop sequence.
			if err := u.session.Close(); err != nil && !errors.Is(err, io.EOF) {
				errs = append(errs, err)
			}
		}
		if err := u.proc.Close(); err != nil {
			errs = append(errs, err)
		}
		_ = u.stderr.Close()
		u.closeErr = errors.Join(errs...)
	})
	return u.closeErr
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
