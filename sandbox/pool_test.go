package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// A Pool serves a Spawn with the init it started ahead (same pid), starts
// the next one, does not serve a profile needing another namespace set from
// it, confines as Spawn does, passes stderr, and on Close leaves no init.
func TestPoolServesWarmInit(t *testing.T) {
	key, value := testenv.Marker(t)
	pl := sandbox.NewPool()
	defer requireNoInitChild(t)
	defer pl.Close()
	idle := sandbox.WaitWarm(t, pl, sandbox.NetworkNone)
	var stderr testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := pl.Spawn(ctx, sandbox.Spec{Name: "warm", Command: "sh", Args: []string{"-c", "echo oops >&2; echo ready; exec cat"},
		Env: map[string]string{key: value}, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Pid() != idle {
		t.Errorf("served by init %d, the pool's waiting init was %d", p.Pid(), idle)
	}
	readReady(t, p)
	c := p.Confinement()
	if os.Geteuid() == 0 && (c.Level != sandbox.LevelStrong || c.Network != "none") {
		t.Errorf("pooled confinement %+v, want strong with network none", c)
	}
	next := sandbox.WaitWarm(t, pl, sandbox.NetworkNone)
	if next == idle {
		t.Fatal("the pool did not start a new init")
	}

	h, err := pl.Spawn(ctx, sandbox.Spec{Name: "host", Command: "sh", Args: []string{"-c", "echo ready; exec cat"},
		Env: map[string]string{key: value}, Profile: sandbox.Profile{Network: sandbox.NetworkHost}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Pid() == next {
		t.Fatal("a network-host profile was served by the network-none init")
	}
	if c := h.Confinement(); c.NetworkNamespace || c.Network != "host" {
		t.Errorf("network host confinement %+v", c)
	}
	readReady(t, h)
	hostIdle := sandbox.WaitWarm(t, pl, sandbox.NetworkHost)
	if sandbox.WaitWarm(t, pl, sandbox.NetworkNone) != next {
		t.Error("the network-none init was used by a network-host spawn")
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil { // cat ends at EOF on stdin
		t.Error(err)
	}
	if !strings.Contains(stderr.String(), "oops") {
		t.Errorf("stderr %q, want the server's line", stderr.String())
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.RequireGone(t, idle, next, hostIdle)
	testenv.RequireNoProcess(t, key, value)

	// After Close, Spawn still works and starts cold.
	q, err := pl.Spawn(ctx, sandbox.Spec{Name: "after", Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(); err != nil {
		t.Error(err)
	}
	q.Close()
}

// An init killed while it waited in the pool is not handed a server: the
// Spawn starts one of its own and succeeds.
func TestPoolReplacesKilledInit(t *testing.T) {
	pl := sandbox.NewPool()
	defer requireNoInitChild(t)
	defer pl.Close()
	idle := sandbox.WaitWarm(t, pl, sandbox.NetworkNone)
	proc, err := os.FindProcess(idle)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.RequireGone(t, idle)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := pl.Spawn(ctx, sandbox.Spec{Name: "after-kill", Command: "sh", Args: []string{"-c", "echo ready; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Pid() == idle {
		t.Fatal("served by the killed init")
	}
	readReady(t, p)
}

// 30 start/stop cycles of a forking, setsid-escaping tree through a pool,
// then Close: no process (marker scan, pids of every init the pool held,
// no sandbox init left among our children), no cgroup, no goroutine
// (goleak in TestMain).
func TestPoolNoLeakAfterCycles(t *testing.T) {
	key, value := testenv.Marker(t)
	pl := sandbox.NewPool()
	var inits []int
	for i := range 30 {
		inits = append(inits, sandbox.WaitWarm(t, pl, sandbox.NetworkNone))
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		p, err := pl.Spawn(ctx, sandbox.Spec{Name: fmt.Sprint("pooled", i), Command: "sh", Args: []string{"-c", leakTree},
			Env: map[string]string{key: value}, StopGrace: 20 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		readReady(t, p)
		if err := p.Close(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		testenv.RequireGone(t, p.Pid())
	}
	inits = append(inits, sandbox.WaitWarm(t, pl, sandbox.NetworkNone))
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.RequireGone(t, inits...)
	testenv.RequireNoProcess(t, key, value)
	requireNoInitChild(t)
	for _, dir := range cgroupDirs(t) {
		if entries, _ := os.ReadDir(dir); len(subdirs(entries)) > 0 {
			t.Errorf("cgroups left in %s: %v", dir, subdirs(entries))
		}
	}
}

func readReady(t *testing.T, p *sandbox.Process) {
	t.Helper()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("%q, %v", buf, err)
	}
}

// requireNoInitChild fails t if a sandbox init is still a child of this
// process (a running one: a zombie has given up its argv).
func requireNoInitChild(t *testing.T) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(testenv.Timeout)
	for {
		left = left[:0]
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, st := range stats {
			b, err := os.ReadFile(st)
			i := strings.LastIndexByte(string(b), ')')
			if err != nil || i < 0 {
				continue
			}
			f := strings.Fields(string(b[i+1:]))
			if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(os.Getpid()) {
				continue
			}
			argv, _ := os.ReadFile(filepath.Join(filepath.Dir(st), "cmdline"))
			if a0, _, _ := strings.Cut(string(argv), "\x00"); a0 == sandbox.InitArg0 {
				left = append(left, filepath.Base(filepath.Dir(st)))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("sandbox inits still children of the test: %v", left)
	}
}
