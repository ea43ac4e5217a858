package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

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

// startInit starts the sandbox init (this binary re-executed, PID 1 of the
// namespaces in attr), hands it the request on fd 3 and waits, bounded by
// ctx, for its first report on fd 4.
func (p *Process) startInit(ctx context.Context, spec Spec, env []string, st *stdio, attr *syscall.SysProcAttr, confine *nsinit.Confine, eg *egressHandover) error {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return err
	}
	attr.Setpgid = true
	attr.Pdeathsig = syscall.SIGKILL
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{nsinit.Arg0, nsinit.Arg1},
		Env:         []string{}, // the init needs nothing; secrets travel on fd 3
		Stdin:       st.childIn,
		Stdout:      st.childOut,
		Stderr:      spec.Stderr,
		ExtraFiles:  []*os.File{reqR, repW}, // fds 3 and 4 (and 5: egress)
		SysProcAttr: attr,
		WaitDelay:   waitDelay,
	}
	if eg != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, eg.init)
	}
	reports := newInitReports()
	err = p.start(cmd, func(ps *os.ProcessState) error { return p.initExitError(reports, ps) })
	p.stages = append(p.stages, stage("fork"))
	reqR.Close()
	repW.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		if namespaceUnavailable(err) {
			return fmt.Errorf("%w: %w", errNoNamespace, err)
		}
		return fmt.Errorf("start sandbox init: %w", err)
	}
	go reports.read(repR)
	wrote := make(chan error, 1)
	go func() {
		err := json.NewEncoder(reqW).Encode(nsinit.Request{
			Command: spec.Command,
			Args:    append([]string{spec.Command}, spec.Args...),
			Env:     env,
			Dir:     spec.Dir,
			Grace:   p.grace,
			Confine: confine,
			Trace:   traceStages.Load(),
		})
		reqW.Close()
		wrote <- err // the init reads to EOF before it reports, or dies (EPIPE)
	}()

	first, err := reports.awaitFirst(ctx)
	if err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		<-wrote
		return err
	}
	werr := <-wrote
	if first.Started {
		p.achieved = first.Achieved
		p.stages = append(append(p.stages, first.Stages...), stage("started"))
		return nil
	}
	<-p.done
	if first.Failed != "" {
		return errors.New(first.Failed)
	}
	return fmt.Errorf("sandbox init ended before starting the server (%v; request: %v)", cmd.ProcessState, werr)
}

// initReports collects what the init says on fd 4: a first report (Started
// or Failed) and, from a started init, a final Exited one.
type initReports struct {
	first chan nsinit.Report // receives the first report, if any
	final nsinit.Report      // set before done closes
	done  chan struct{}      // closed at EOF, once the init is gone
}

func newInitReports() *initReports {
	return &initReports{first: make(chan nsinit.Report, 1), done: make(chan struct{})}
}

func (r *initReports) read(f *os.File) {
	defer close(r.done)
	defer f.Close()
	dec := json.NewDecoder(f)
	for n := 0; ; n++ {
		var rep nsinit.Report
		if dec.Decode(&rep) != nil {
			return
		}
		switch {
		case rep.Exited:
			r.final = rep
			return
		case n == 0:
			r.first <- rep
		}
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
func (p *Process) initExitError(r *initReports, ps *os.ProcessState) error {
	<-r.done
	switch {
	case !r.final.Exited:
		return p.exitError(ps)
	case r.final.Code == 0 && r.final.Signal == 0:
		return nil
	}
	return &ExitError{Name: p.name, Code: r.final.Code, Signal: syscall.Signal(r.final.Signal)}
}
