package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// BenchmarkProxyToolsCall measures what the gateway adds to one tools/call,
// in one run against its own baseline: a go-sdk client calls the demo
// server's echo directly over stdio (direct) and through `mcp-warden serve
// --stdio` with the same server as its stdio upstream, the default policy
// deciding and the decision log written to a file (gateway).
//
//   - latency: calls alternate between the two, one at a time; reports the
//     p50 and p99 of each and what the gateway adds (added_p50_us, added_p99_us).
//   - throughput16: 16 concurrent callers on one session share b.N calls,
//     first direct then through the gateway; reports calls per second of
//     each and gateway/direct.
//
// `make bench-proxy` runs it.
func BenchmarkProxyToolsCall(b *testing.B) {
	exe := testenv.BuildGo(b, "./cmd/mcp-warden")
	key, value := testenv.Marker(b)
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	cfg := fmt.Sprintf(`servers:
  - name: demo
    command: %s
    args: [demo-server]
    env: {%s: %q}
    tools: {allow: ["*"], block: [reset_notes]}
decision_log: {path: %s}
`, exe, key, value, filepath.Join(dir, "decisions.log"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	connect := func(cmd *exec.Cmd) *mcp.ClientSession {
		cmd.Env = append(os.Environ(), key+"="+value)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	direct := connect(exec.Command(exe, "demo-server"))
	gateway := connect(exec.Command(exe, "serve", "--config", cfgPath, "--stdio"))
	defer func() {
		_ = direct.Close()
		_ = gateway.Close()
		testenv.RequireNoProcess(b, key, value)
	}()
	callErr := func(cs *mcp.ClientSession, name string) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": "benchmark"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: error result %+v", name, res.Content)
		}
		return err
	}
	call := func(cs *mcp.ClientSession, name string) {
		if err := callErr(cs, name); err != nil {
			b.Fatal(err)
		}
	}
	for range 200 { // warm both paths up (connections, caches, JIT-free but lazy inits)
		call(direct, "echo")
		call(gateway, "demo__echo")
	}

	b.Run("latency", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		g := make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			call(direct, "echo")
			t1 := time.Now()
			call(gateway, "demo__echo")
			d, g = append(d, t1.Sub(t0)), append(g, time.Since(t1))
		}
		b.StopTimer()
		slices.Sort(d)
		slices.Sort(g)
		q := func(s []time.Duration, p float64) float64 {
			return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(q(d, 0.5), "direct_p50_us")
		b.ReportMetric(q(g, 0.5), "gateway_p50_us")
		b.ReportMetric(q(g, 0.5)-q(d, 0.5), "added_p50_us")
		b.ReportMetric(q(d, 0.99), "direct_p99_us")
		b.ReportMetric(q(g, 0.99), "gateway_p99_us")
		b.ReportMetric(q(g, 0.99)-q(d, 0.99), "added_p99_us")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("throughput16", func(b *testing.B) {
		const callers = 16
		run := func(cs *mcp.ClientSession, name string) float64 {
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			var failed atomic.Pointer[error]
			t0 := time.Now()
			for range callers {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if err := callErr(cs, name); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			return float64(b.N) / time.Since(t0).Seconds()
		}
		d := run(direct, "echo")
		g := run(gateway, "demo__echo")
		b.StopTimer()
		b.ReportMetric(d, "direct_calls/s")
		b.ReportMetric(g, "gateway_calls/s")
		b.ReportMetric(g/d, "gateway/direct")
		b.ReportMetric(0, "ns/op")
	})
}
