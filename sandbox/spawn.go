package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/environ"
)

// waitDelay bounds how long reaping waits for a descendant that still holds
// the server's stderr pipe (only when Spec.Stderr is not an *os.File).
const waitDelay = time.Second

// errNoNamespace marks a failure to start the init that means "namespaces
// are not available here": Spawn then falls back to a direct child.
var errNoNamespace = errors.New("namespaces unavailable")

// Spawn starts the server described by spec. ctx bounds the start only: once
// Spawn has returned, the server runs until it exits or Close is called, and
// the caller must call Close. A server that cannot be started (program not
// found, bad Dir, refused variable) yields an error naming the server.
//
// Cost: with a PID namespace each server has one extra process, the init (a
// re-executed copy of this binary, a few MB resident), and Spawn waits for it
// to report the server started. Spawn is safe for concurrent use.
func Spawn(ctx context.Context, spec Spec) (*Process, error) {
	p, err := spawn(ctx, spec, namespaceAttempts())
	if err != nil {
		return nil, fmt.Errorf("spawn %q: %w", spec.Name, err)
	}
	return p, nil
}

func spawn(ctx context.Context, spec Spec, attempts []*syscall.SysProcAttr) (*Process, error) {
	if spec.Command == "" {
		return nil, errors.New("no command")
	}
	env, err := environ.Build(spec.Env)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := newStdio()
	if err != nil {
		return nil, err
	}
	defer st.closeChildEnds() // the started process holds its own copies

	for _, attr := range attempts {
		p := newProcess(spec, st)
		err := p.startInit(ctx, spec, env, st, attr)
		if err == nil {
			p.confinement.PIDNamespace = true
			return p, nil
		}
		if !errors.Is(err, errNoNamespace) {
			st.closeParentEnds()
			return nil, err
		}
	}
	p := newProcess(spec, st)
	if err := p.startDirect(spec, env, st); err != nil {
		st.closeParentEnds()
		return nil, err
	}
	return p, nil
}

// namespaceAttempts lists the init's namespace settings to try, best first.
// Namespaces beyond PID (mount, network, IPC, UTS, cgroup) join here.
func namespaceAttempts() []*syscall.SysProcAttr {
	if !initCalled.Load() {
		return nil
	}
	if os.Geteuid() == 0 {
		return []*syscall.SysProcAttr{{Cloneflags: syscall.CLONE_NEWPID}}
	}
	// Unprivileged: a user namespace mapping only our own ids, to the same
	// ids inside, so the init and the server hold no capabilities.
	uid, gid := os.Geteuid(), os.Getegid()
	return []*syscall.SysProcAttr{{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
	}}
}

// namespaceUnavailable tells clone/exec refusals of the init (no privilege,
// namespaces disabled or exhausted, no /proc) from other start failures.
func namespaceUnavailable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EINVAL, syscall.ENOSPC,
		syscall.EUSERS, syscall.ENOSYS, syscall.ENOENT, syscall.EACCES} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// startDirect is the fallback without an init: the server itself is the
// child, in its own process group; setsid escapees can outlive it.
func (p *Process) startDirect(spec Spec, env []string, st *stdio) error {
	path, err := environ.Resolve(spec.Command, env, spec.Dir)
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{spec.Command}, spec.Args...),
		Env:         env,
		Dir:         spec.Dir,
		Stdin:       st.childIn,
		Stdout:      st.childOut,
		Stderr:      spec.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		WaitDelay:   waitDelay,
	}
	if err := p.start(cmd, p.exitError); err != nil {
		return fmt.Errorf("command %q: %w", spec.Command, err)
	}
	return nil
}

// start runs cmd.Start and later cmd.Wait on one goroutine locked to its OS
// thread: Pdeathsig fires when the creating thread exits (golang/go#27505),
// so the thread must outlive the child. The goroutine never unlocks; its
// thread ends after the child is reaped. Then status computes the exit error
// and Done closes.
func (p *Process) start(cmd *exec.Cmd, status func(*os.ProcessState) error) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the status comes from ProcessState; ErrWaitDelay only means stderr was held open
		p.exitErr = status(cmd.ProcessState)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return err
	}
	p.cmd = cmd
	p.pid = cmd.Process.Pid
	return nil
}

// stdio holds the pipes for the server's stdin and stdout. The server's ends
// are passed as *os.File so no copying goroutine sits in between and reads
// see every byte the server wrote before exiting.
type stdio struct {
	childIn, childOut *os.File // the server's ends
	in, out           *os.File // the gateway's ends
}

func newStdio() (*stdio, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	return &stdio{childIn: inR, childOut: outW, in: inW, out: outR}, nil
}

func (s *stdio) closeChildEnds() {
	s.childIn.Close()
	s.childOut.Close()
}

func (s *stdio) closeParentEnds() {
	s.in.Close()
	s.out.Close()
}
