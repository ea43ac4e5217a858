package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/cgroup"
	"github.com/mcp-warden/mcp-warden/sandbox/internal/egress"
	"github.com/mcp-warden/mcp-warden/sandbox/internal/nsinit"
)

// Process is a running server. Its methods are safe for concurrent use.
type Process struct {
	name        string
	grace       time.Duration
	confinement Confinement
	stdin       *os.File // gateway's end of the server's stdin
	stdout      *os.File // gateway's end of the server's stdout

	cmd      *exec.Cmd
	pid      int              // also the process-group id (Setpgid)
	achieved *nsinit.Achieved // what the init reported setting up
	cgroup   *cgroup.Group    // nil without a cgroup of its own
	stages   []nsinit.Stage   // start-up stages, when traced
	egress   *egress.Proxy    // the server's egress proxy, if any

	done chan struct{} // closed once reaped; exit is set before
	exit *ExitError    // nil: status 0; Name is filled in by Wait

	closeOnce sync.Once
	closeErr  error
}

// newProcess is a Process on the gateway's ends of st, not yet started and
// not yet named: an init started ahead of need learns its server later.
func newProcess(st *stdio) *Process {
	return &Process{
		confinement: Confinement{ProcessGroup: true, ParentDeathSignal: true},
		stdin:       st.in,
		stdout:      st.out,
		done:        make(chan struct{}),
	}
}

func stopGrace(spec Spec) time.Duration {
	if spec.StopGrace <= 0 {
		return defaultStopGrace
	}
	return spec.StopGrace
}

// Stdin returns the server's stdin. Closing it asks a well-behaved server to
// exit; Close closes it too.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout returns the server's stdout. It reaches EOF once every process of
// the server that holds it has exited. Close closes it, so read what you
// need before calling Close.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Pid returns the host pid of the process Spawn started, which is also the
// id of its process group: the sandbox init when Confinement().PIDNamespace
// is true, the server itself otherwise.
func (p *Process) Pid() int { return p.pid }

// Confinement reports what Spawn achieved for this server.
func (p *Process) Confinement() Confinement { return p.confinement }

// Done is closed once the server (with PIDNamespace, its whole sandbox) has
// exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until Done is closed and returns nil if the server exited with
// status 0, else an *ExitError. It does not stop the server; Close does.
func (p *Process) Wait() error {
	<-p.done
	if p.exit == nil {
		return nil
	}
	e := *p.exit
	e.Name = p.name
	return &e
}

// Close stops the server and releases its pipes: it closes stdin, waits
// StopGrace, sends SIGTERM to the process group (the init forwards it to the
// whole namespace), waits StopGrace again, then SIGKILLs. It always ends with
// SIGKILL to the group, for stragglers, and returns once everything Spawn
// started has been reaped: at once if the server had already exited, after
// at most about twice StopGrace otherwise. Close is idempotent; concurrent
// calls all return after the teardown.
func (p *Process) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.stop() })
	return p.closeErr
}

func (p *Process) stop() error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, os.ErrProcessDone) &&
			!errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	keep(p.stdin.Close())
	if !p.exitedWithin(p.grace) {
		keep(p.signalGroup(syscall.SIGTERM))
		if !p.exitedWithin(p.grace) {
			keep(p.cmd.Process.Kill()) // pidfd-based: cannot hit a reused pid
			keep(p.signalGroup(syscall.SIGKILL))
			if p.cgroup != nil {
				keep(p.cgroup.Kill())
			}
		}
	}
	<-p.done
	if p.egress != nil {
		keep(p.egress.Close())
	}
	// Without a PID namespace, members of the group can outlive its leader;
	// the group id stays reserved while any of them lives, so this reaches
	// exactly them.
	keep(p.signalGroup(syscall.SIGKILL))
	if p.cgroup != nil {
		keep(p.cgroup.Close())
	}
	keep(p.stdout.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %q: %w", p.name, err)
	}
	return nil
}

func (p *Process) exitedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func (p *Process) signalGroup(sig syscall.Signal) error {
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("signal process group %d: %w", p.pid, err)
	}
	return nil
}

// exitError turns the wait status of the process Spawn started into Wait's
// result (without the server's name).
func exitError(ps *os.ProcessState) *ExitError {
	if ps == nil {
		return &ExitError{Code: -1}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return &ExitError{Code: -1}
	case ws.Signaled():
		return &ExitError{Code: -1, Signal: ws.Signal()}
	case ws.ExitStatus() != 0:
		return &ExitError{Code: ws.ExitStatus()}
	}
	return nil
}
