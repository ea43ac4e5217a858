package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/environ"
)

// Main runs the init and exits the process; it never returns. It must run
// before anything else in the binary: it is called from sandbox.Init.
func Main() {
	// Confinement is per thread: the thread that sets it up must be the one
	// that forks the server, so the main goroutine keeps this thread.
	runtime.LockOSThread()
	var trace stages
	trace.mark("runtime") // the Go runtime and every package init of this binary
	report := os.NewFile(ReportFD, "report")
	requests := os.NewFile(RequestFD, "request")
	dec := json.NewDecoder(io.LimitReader(requests, MaxRequestSize))
	var prep Prepare
	if err := dec.Decode(&prep); err != nil {
		fail(report, ExitInitFailed, fmt.Sprintf("sandbox init: read preparation: %v", err))
	}
	early := prepare(prep, &trace)
	CloseInheritedOnExec()
	// Subscribe before starting the server so that no SIGCHLD or stop signal
	// is lost. As PID 1 the init gets no default actions: only these arrive.
	// A stop signal that comes while the init waits stops the server as
	// soon as it runs.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	send(report, Report{Waiting: true}) // an init started ahead of need waits here
	req, err := readRequest(dec)
	requests.Close()
	if err != nil {
		fail(report, ExitInitFailed, fmt.Sprintf("sandbox init: read request: %v", err))
	}
	trace.mark("request")

	path, err := environ.Resolve(req.Command, req.Env, req.Dir)
	if err != nil {
		fail(report, ExitCannotStart, err.Error())
	}
	attr := &syscall.ProcAttr{Dir: req.Dir, Env: req.Env, Files: []uintptr{0, 1, 2}}
	var achieved *Achieved
	if c := req.Confine; c != nil {
		achieved = confine(c, early, path, req.Args, req.Env, &trace)
		if c.UID >= 0 {
			// From uid 0 to another, the kernel clears the server's
			// capabilities; setgroups is denied in the namespace.
			attr.Sys = &syscall.SysProcAttr{Credential: &syscall.Credential{
				Uid: uint32(c.UID), Gid: uint32(c.GID), NoSetGroups: true}}
		}
	}
	// No Pdeathsig for the server: when the init dies the kernel kills the
	// whole namespace anyway.
	pid, err := syscall.ForkExec(path, req.Args, attr)
	if err != nil {
		fail(report, ExitCannotStart, fmt.Sprintf("command %q: exec %s: %v", req.Command, path, err))
	}
	trace.mark("exec")
	releaseStdio()
	started := Report{Started: true, Pid: pid, Achieved: achieved}
	if req.Trace {
		started.Stages = trace
	}
	send(report, started)

	var (
		server   unix.WaitStatus
		exited   bool
		stopping bool
		drain    <-chan time.Time // after the server exited while stopping
	)
	for {
		select {
		case sig := <-sigs:
			if sig != unix.SIGCHLD {
				// Broadcast to every process of the namespace, including
				// setsid escapees; the init itself is exempt from kill(-1).
				_ = unix.Kill(-1, sig.(unix.Signal))
				stopping = true
				continue
			}
			ws, found, alive := reap(pid)
			if found {
				server, exited = ws, true
			}
			if !exited {
				continue
			}
			// Exiting makes the kernel SIGKILL the rest of the namespace.
			// While stopping, first let the processes that got the signal
			// finish their own shutdown, for at most the grace period.
			if stopping && alive {
				if drain == nil {
					drain = time.After(req.Grace)
				}
				continue
			}
		case <-drain:
		}
		finish(report, server)
	}
}

// stages records when each start-up stage ended.
type stages []Stage

func (s *stages) mark(name string) {
	*s = append(*s, Stage{Name: name, At: time.Now().UnixNano()})
}

// finish reports the server's status and exits with it (128+signal if it
// was killed: PID 1 cannot re-raise a signal on itself).
func finish(report io.Writer, server unix.WaitStatus) {
	r := Report{Exited: true, Code: server.ExitStatus()}
	code := r.Code
	if server.Signaled() {
		r.Code, r.Signal = -1, int(server.Signal())
		code = 128 + r.Signal
	}
	send(report, r)
	exit(code)
}

// readRequest decodes the Request that follows the Prepare.
func readRequest(dec *json.Decoder) (*Request, error) {
	var req Request
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w (truncated, or over %d bytes)", err, MaxRequestSize)
		}
		return nil, err
	}
	if req.Command == "" || len(req.Args) == 0 {
		return nil, errors.New("request without a command")
	}
	return &req, nil
}

// CloseInheritedOnExec marks every fd above stderr close-on-exec, so that a
// child started without an explicit list of files inherits only 0, 1 and 2,
// whatever this process itself inherited (cf. runc CVE-2024-21626). The fds
// stay usable here; files handed over on purpose (os/exec Stdin, ExtraFiles)
// are dup2'ed in the child, which clears the flag.
func CloseInheritedOnExec() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// releaseStdio points the init's own stdin and stdout at /dev/null: the
// server owns the JSON-RPC channel and the init must never hold it open.
func releaseStdio() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer null.Close()
	_ = unix.Dup3(int(null.Fd()), 0, 0)
	_ = unix.Dup3(int(null.Fd()), 1, 0)
}

// reap collects every exited child (orphans are re-parented to the init),
// returns the server's status if it was among them, and whether any child
// is still alive.
func reap(server int) (status unix.WaitStatus, found, alive bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil: // ECHILD: nobody left
			return status, found, false
		case pid == 0:
			return status, found, true
		case pid == server:
			status, found = ws, true
		}
	}
}

func send(w io.Writer, r Report) {
	if err := json.NewEncoder(w).Encode(r); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox init: report: %v\n", err)
	}
}

// fail reports a start-up failure, echoes it as one line on stderr when the
// parent is gone, and exits.
func fail(report io.Writer, code int, msg string) {
	if err := json.NewEncoder(report).Encode(Report{Failed: msg}); err != nil {
		fmt.Fprintln(os.Stderr, msg)
	}
	exit(code)
}

// exit ends the init at once. The init has nothing to flush, and os.Exit
// would add the race detector's one-second exit sleep in -race builds,
// delaying Done by as much.
func exit(code int) {
	syscall.Exit(code)
}
