package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/cgroup"
	"github.com/mcp-warden/mcp-warden/sandbox/internal/nsinit"
)

// initCalled records that this binary dispatches the sandbox init, so that
// re-executing /proc/self/exe runs the init and not the gateway.
var initCalled atomic.Bool

// Init must be the first statement of main() (and of TestMain in every
// package whose tests spawn servers). If this process was started as the
// sandbox init it runs the init and never returns. Otherwise it marks every
// file descriptor this process inherited above stderr close-on-exec (they
// stay usable here, but no server inherits them), records that Spawn may use
// the init, and returns. Package init functions run before it in both roles,
// so they must not have side effects.
func Init() {
	if nsinit.Requested() {
		nsinit.Main()
	}
	nsinit.CloseInheritedOnExec()
	initCalled.Store(true)
}

// traceStages makes Spawn ask the init for the time of each start-up stage
// (Process.stages), to profile the spawn overhead (BenchmarkSpawnToReady).
var traceStages atomic.Bool

func stage(name string) nsinit.Stage {
	return nsinit.Stage{Name: name, At: time.Now().UnixNano()}
}

// idleInit is a started sandbox init (this binary re-executed, PID 1 of the
// namespaces of its attempt) that waits for its request on fd 3: the clone,
// the uid/gid maps, the Go runtime's start-up and the nsinit.Prepare steps
// are behind it (once reports.waiting is closed). Its Process has no server
// yet.
type idleInit struct {
	p         *Process
	at        attempt
	group     *cgroup.Group // nil without a cgroup of its own
	cgroupErr error         // why group is nil
	request   *os.File      // write end of fd 3
	reports   *initReports  // what the init says on fd 4
	egress    *egressHandover
	stderr    *stderrSink
	stages    []nsinit.Stage
	pooled    bool // started ahead of need by a Pool
}

// errInitEnded is a sandbox init that ended before reporting anything.
var errInitEnded = errors.New("sandbox init ended before starting the server")

// prestart starts an init for attempt at, in a cgroup of its own when it
// can, and leaves it waiting for its request. A clone the kernel refuses
// for lack of namespaces is errNoNamespace. The init inherits fds 3 (the
// request), 4 (reports) and 5 (the egress handover); its stdin and stdout
// are the server's pipes, its stderr a pipe to the Spec's writer, bound at
// handover.
func prestart(at attempt) (*idleInit, error) {
	st, err := newStdio()
	if err != nil {
		return nil, err
	}
	defer st.closeChildEnds() // the started init holds its own copies
	w := &idleInit{p: newProcess(st), at: at, stderr: &stderrSink{}}
	w.group, w.cgroupErr = cgroup.New(cgroup.Detect(), "srv")
	w.stages = append(w.stages, stage("cgroup"))
	reqR, reqW, err := os.Pipe()
	if err != nil {
		w.discard()
		return nil, err
	}
	defer reqR.Close()
	w.request = reqW
	repR, repW, err := os.Pipe()
	if err != nil {
		w.discard()
		return nil, err
	}
	defer repW.Close()
	if w.egress, err = newEgressHandover(); err != nil {
		repR.Close()
		w.discard()
		return nil, err
	}
	// What the init can do before its request; the pipe holds it until the
	// init reads.
	if err := json.NewEncoder(reqW).Encode(nsinit.Prepare{PrivateMounts: at.mountNS, LoopbackUp: at.netNS}); err != nil {
		repR.Close()
		w.discard()
		return nil, err
	}
	attr := *at.attr // attempts are templates; the cgroup is this init's
	attr.Setpgid = true
	attr.Pdeathsig = syscall.SIGKILL
	if w.group != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, w.group.FD()
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{nsinit.Arg0, nsinit.Arg1},
		// The init needs nothing from the environment (secrets travel on
		// fd 3); one P is all it uses, and fewer threads make every
		// all-threads operation (seccomp's TSYNC) cheaper.
		Env:         []string{"GOMAXPROCS=1"},
		Stdin:       st.childIn,
		Stdout:      st.childOut,
		Stderr:      w.stderr,
		ExtraFiles:  []*os.File{reqR, repW, w.egress.init}, // fds 3, 4, 5
		SysProcAttr: &attr,
		WaitDelay:   waitDelay,
	}
	w.reports = newInitReports()
	err = w.p.start(cmd, func(ps *os.ProcessState) *ExitError { return initExitError(w.reports, ps) })
	w.stages = append(w.stages, stage("fork"))
	if err != nil {
		repR.Close()
		w.discard()
		if namespaceUnavailable(err) {
			return nil, fmt.Errorf("%w: %w", errNoNamespace, err)
		}
		return nil, fmt.Errorf("start sandbox init: %w", err)
	}
	go w.reports.read(repR)
	return w, nil
}

// discard ends an init that will not get a request (or whose start
// failed) and releases everything prestart made.
func (w *idleInit) discard() {
	if w.p.cmd != nil {
		_ = w.p.cmd.Process.Kill()
		<-w.p.done
	}
	if w.request != nil {
		w.request.Close()
	}
	w.egress.Close()
	w.p.stdin.Close()
	w.p.stdout.Close()
	closeGroup(w.group)
}

// alive reports whether the init has not ended while it waited.
func (w *idleInit) alive() bool {
	select {
	case <-w.p.done:
		return false
	default:
		return true
	}
}

// handOver sends the init its request (built from spec and prof) and waits,
// bounded by ctx, for its first report. begin is when the Spawn began:
// stages before it (an init started ahead of need) are not part of this
// start. On success the Process runs the server; on failure everything is
// released.
func (w *idleInit) handOver(ctx context.Context, spec Spec, prof Profile, env []string, begin nsinit.Stage, missing []string) (*Process, error) {
	p, at := w.p, w.at
	p.name, p.grace = spec.Name, stopGrace(spec)
	w.stderr.bind(spec.Stderr)
	missing = slices.Clone(missing)
	limited := false
	if w.group == nil {
		missing = append(missing, "cgroup: "+w.cgroupErr.Error())
	} else if cgroup.Detect().Limits {
		if err := w.group.Limit(int64(prof.Limits.MemoryMiB)<<20, prof.Limits.Processes); err != nil {
			missing = append(missing, "cgroup limits: "+err.Error())
		} else {
			limited = true
		}
	}
	confine := confineRequest(spec, prof, env, at, limited)
	wantEgress := len(prof.Egress.Allow) > 0
	if wantEgress && at.netNS {
		confine.EgressListen = EgressProxyAddr
	}
	prepared := stage("prepare")
	wrote := make(chan error, 1)
	go func() {
		err := json.NewEncoder(w.request).Encode(nsinit.Request{
			Command: spec.Command,
			Args:    append([]string{spec.Command}, spec.Args...),
			Env:     env,
			Dir:     spec.Dir,
			Grace:   p.grace,
			Confine: confine,
			Trace:   traceStages.Load(),
		})
		w.request.Close()
		wrote <- err // the init reads to EOF before it reports, or dies (EPIPE)
	}()
	fail := func(err error) (*Process, error) {
		w.request = nil // closed by the writer
		w.discard()
		return nil, err
	}
	first, err := w.reports.awaitFirst(ctx)
	if err != nil {
		_ = p.cmd.Process.Kill()
		<-wrote
		return fail(err)
	}
	werr := <-wrote
	if !first.Started {
		<-p.done
		if first.Failed != "" {
			return fail(errors.New(first.Failed))
		}
		return fail(fmt.Errorf("%w (%v; request: %v)", errInitEnded, p.cmd.ProcessState, werr))
	}
	p.achieved = first.Achieved
	p.cgroup = w.group
	for _, s := range append(w.stages, first.Stages...) {
		if s.At >= begin.At {
			p.stages = append(p.stages, s)
		}
	}
	p.stages = append(append([]nsinit.Stage{begin}, p.stages...), stage("started"))
	if w.pooled { // the request was written at prepare, not before the init's start
		p.stages = slices.Insert(p.stages, 1, prepared)
	}
	if confine.EgressListen != "" {
		if p.egress, err = w.egress.startProxy(prof, spec); err != nil {
			missing = append(missing, err.Error())
		}
	} else if wantEgress {
		missing = append(missing, "egress proxy: no network namespace")
	}
	w.egress.Close()
	p.confinement = achievedConfinement(prof, at, w.group, limited, p.achieved, p.egress != nil, missing)
	return p, nil
}

// stderrSink is the init's stderr for os/exec, which copies from a pipe
// into it until every holder of the pipe has exited: an init started ahead
// of need learns its server's stderr writer only at handover. Before that,
// and without a writer, lines are dropped.
type stderrSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *stderrSink) bind(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *stderrSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(b), nil
	}
	return s.w.Write(b)
}

// initReports collects what the init says on fd 4: a first report (Started
// or Failed) and, from a started init, a final Exited one.
type initReports struct {
	waiting chan struct{}      // closed when the init waits for its request
	first   chan nsinit.Report // receives the first report after that, if any
	final   nsinit.Report      // set before done closes
	done    chan struct{}      // closed at EOF, once the init is gone
}

func newInitReports() *initReports {
	return &initReports{waiting: make(chan struct{}), first: make(chan nsinit.Report, 1), done: make(chan struct{})}
}

func (r *initReports) read(f *os.File) {
	defer close(r.done)
	defer f.Close()
	dec := json.NewDecoder(f)
	waiting := false
	for n := 0; ; {
		var rep nsinit.Report
		if dec.Decode(&rep) != nil {
			return
		}
		switch {
		case rep.Waiting:
			if !waiting {
				close(r.waiting)
				waiting = true
			}
			continue
		case rep.Exited:
			r.final = rep
			return
		case n == 0:
			r.first <- rep
		}
		n++
	}
}

// awaitFirst returns the first report, a zero Report if the init ended
// without one, or ctx's error.
func (r *initReports) awaitFirst(ctx context.Context) (nsinit.Report, error) {
	select {
	case rep := <-r.first:
		return rep, nil
	case <-r.done:
		select {
		case rep := <-r.first:
			return rep, nil
		default:
			return nsinit.Report{}, nil
		}
	case <-ctx.Done():
		return nsinit.Report{}, ctx.Err()
	}
}

// initExitError is Wait's result in PID-namespace mode: the server's status
// as the init reported it, or the init's own if it was killed first.
func initExitError(r *initReports, ps *os.ProcessState) *ExitError {
	<-r.done
	switch {
	case !r.final.Exited:
		return exitError(ps)
	case r.final.Code == 0 && r.final.Signal == 0:
		return nil
	}
	return &ExitError{Code: r.final.Code, Signal: syscall.Signal(r.final.Signal)}
}
