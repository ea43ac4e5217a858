package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// leakTree forks, double-forks, detaches with setsid and ignores SIGTERM,
// then says ready and ignores stdin.
const leakTree = `trap "" TERM
sleep 1001 &
sh -c 'sleep 1002 & wait' &
setsid sh -c 'trap "" TERM; sleep 1003 &'
echo ready
wait`

// 100 start/stop cycles of that tree under the default profile leave no
// process (marker scan), no cgroup and no goroutine (goleak in TestMain).
func TestNoLeakAfter100Cycles(t *testing.T) {
	key, value := testenv.Marker(t)
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: fmt.Sprint("leak", i), Command: "sh", Args: []string{"-c", leakTree},
			Env: map[string]string{key: value}, StopGrace: 20 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("cycle %d: %q, %v", i, buf, err)
		}
		if i == 0 && p.Confinement().Level != sandbox.LevelStrong && os.Geteuid() == 0 {
			t.Fatalf("confinement %+v", p.Confinement())
		}
		if err := p.Close(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		testenv.RequireGone(t, p.Pid())
	}
	testenv.RequireNoProcess(t, key, value)
	for _, dir := range cgroupDirs(t) {
		if entries, _ := os.ReadDir(dir); len(subdirs(entries)) > 0 {
			t.Errorf("cgroups left in %s: %v", dir, subdirs(entries))
		}
	}
}

func cgroupDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		m, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf("mcp-warden-%d", os.Getpid())))
		dirs = append(dirs, m...)
	}
	return dirs
}

func subdirs(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// BenchmarkSpawnToReady measures, in the same run, spawn-to-first-byte of
// the same server started bare (no init), confined by the default profile
// from cold (Spawn: clone, re-exec, runtime start-up, confinement) and
// confined through a Pool holding a waiting init (pooled: confinement
// only), and reports each and the differences to bare (extra-*-ms/spawn),
// plus the mean time of each start-up stage of both confined spawns
// (cold:* and pooled:* metrics) to show where the difference goes. Before
// every measured spawn the pool's replacement init has started, so no
// background start competes with a measurement.
func BenchmarkSpawnToReady(b *testing.B) {
	sandbox.TraceStages(b)
	pl := sandbox.NewPool()
	defer pl.Close()
	stageTotal := map[string]time.Duration{}
	var order []string
	ready := func(b *testing.B, spawn func(context.Context, sandbox.Spec) (*sandbox.Process, error), prefix string) time.Duration {
		sandbox.WaitWarm(b, pl, sandbox.NetworkNone)
		start := time.Now()
		p, err := spawn(context.Background(), sandbox.Spec{Name: "bench", Command: "sh", Args: []string{"-c", "echo ready; exec cat"}})
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(p.Stdout(), buf); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		names, durs := sandbox.StageDurations(p)
		for i, name := range names {
			name = prefix + name
			if _, ok := stageTotal[name]; !ok {
				order = append(order, name)
			}
			stageTotal[name] += durs[i]
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var bare, cold, pooled time.Duration
	for b.Loop() {
		sandbox.WithoutInitDo(func() { bare += ready(b, sandbox.Spawn, "") })
		cold += ready(b, sandbox.Spawn, "cold:")
		pooled += ready(b, pl.Spawn, "pooled:")
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	b.ReportMetric(ms(bare), "bare-ms/spawn")
	b.ReportMetric(ms(cold), "cold-ms/spawn")
	b.ReportMetric(ms(pooled), "pooled-ms/spawn")
	b.ReportMetric(ms(cold-bare), "extra-cold-ms/spawn")
	b.ReportMetric(ms(pooled-bare), "extra-pooled-ms/spawn")
	for _, name := range order {
		b.ReportMetric(ms(stageTotal[name]), name+"-ms")
	}
}
