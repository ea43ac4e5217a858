package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// BenchmarkProxyToolsCall measures what the gateway adds to one tools/call,
// in one run against its own baselines: a go-sdk client calls the demo
// server's echo directly over stdio (direct), through a bare go-sdk relay
// (testdata/servers/relay: one server and one client session passing the
// call on, nothing else — the floor of any go-sdk hop, relay), and through
// `mcp-warden serve --stdio` with the same server as its stdio upstream, the
// default policy deciding and the decision log written to a file (gateway),
// and the same gateway with `policy.engine: wasm` (wasm).
//
//   - latency: calls rotate over the four, one at a time; reports the p50
//     and p99 of each, what the gateway adds to direct (added_p50_us,
//     added_p99_us; wasm_added_p50_us, wasm_added_p99_us) and to the bare
//     relay (over_relay_p50_us, over_relay_p99_us), and the CPU time each
//     process spends per call.
//   - throughput16: 16 concurrent callers on one session share b.N calls
//     on each path, in ten rounds in which the four take turns; reports
//     calls per second of each and their ratios to direct.
//
// `make bench-proxy` runs it.
func BenchmarkProxyToolsCall(b *testing.B) {
	exe := testenv.BuildGo(b, "./cmd/mcp-warden")
	key, value := testenv.Marker(b)
	dir := b.TempDir()
	config := func(name, policy string) string {
		path := filepath.Join(dir, name+".yaml")
		cfg := fmt.Sprintf(`servers:
  - name: demo
    command: %s
    args: [demo-server]
    env: {%s: %q}
    tools: {allow: ["*"], block: [reset_notes]}
decision_log: {path: %s}
%s`, exe, key, value, filepath.Join(dir, name+".log"), policy)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
		return path
	}
	ctx := context.Background()
	var pids []int // direct, relay, gateway, wasm: whose CPU time a latency run reports
	// Each process's stderr goes to a file, read back when a call fails.
	stderrs := map[string]string{}
	connect := func(name string, cmd *exec.Cmd) *mcp.ClientSession {
		cmd.Env = append(os.Environ(), key+"="+value)
		stderrs[name] = filepath.Join(dir, name+".stderr")
		f, err := os.Create(stderrs[name])
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close() // the child has its own copy
		cmd.Stderr = f
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		return cs
	}
	relayExe := testenv.BuildGo(b, "./testdata/servers/relay")
	direct := connect("direct", exec.Command(exe, "demo-server"))
	relay := connect("relay", exec.Command(relayExe, exe, "demo-server"))
	gateway := connect("gateway", exec.Command(exe, "serve", "--config", config("gateway", ""), "--stdio"))
	// The Wasm engine compiles the policy at start (a second or so the first
	// time, then from its cache directory): started last, not timed.
	wasm := connect("wasm", exec.Command(exe, "serve", "--config", config("wasm", "policy: {engine: wasm}\n"), "--stdio"))
	defer func() {
		_ = direct.Close()
		_ = relay.Close()
		_ = gateway.Close()
		_ = wasm.Close()
		testenv.RequireNoProcess(b, key, value)
	}()
	paths := map[*mcp.ClientSession]string{direct: "direct", relay: "relay", gateway: "gateway", wasm: "wasm"}
	callErr := func(cs *mcp.ClientSession, name string) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": "benchmark"}})
		if err == nil && res.IsError {
			var text []string
			for _, c := range res.Content {
				if t, ok := c.(*mcp.TextContent); ok {
					text = append(text, t.Text)
				}
			}
			err = fmt.Errorf("%s: error result %q", name, text)
		}
		if err != nil {
			path := paths[cs]
			err = fmt.Errorf("%s: %w\n%s", path, err, failureContext(stderrs[path], filepath.Join(dir, path+".log")))
		}
		return err
	}
	call := func(cs *mcp.ClientSession, name string) {
		if err := callErr(cs, name); err != nil {
			b.Fatal(err)
		}
	}
	for range 200 { // warm every path up (connections, caches, lazy inits)
		call(direct, "echo")
		call(relay, "echo")
		call(gateway, "demo__echo")
		call(wasm, "demo__echo")
	}

	b.Run("latency", func(b *testing.B) {
		cpu0 := processCPU(b, pids...)
		d := make([]time.Duration, 0, b.N)
		r := make([]time.Duration, 0, b.N)
		g := make([]time.Duration, 0, b.N)
		w := make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			call(direct, "echo")
			t1 := time.Now()
			call(relay, "echo")
			t2 := time.Now()
			call(gateway, "demo__echo")
			t3 := time.Now()
			call(wasm, "demo__echo")
			d, r, g, w = append(d, t1.Sub(t0)), append(r, t2.Sub(t1)), append(g, t3.Sub(t2)), append(w, time.Since(t3))
		}
		b.StopTimer()
		cpu1 := processCPU(b, pids...)
		for i, name := range []string{"server", "relay", "gateway", "wasm"} {
			// CPU time of that process per call. The relay and both
			// gateways run servers of their own (children, not counted):
			// the direct server serves one call per round.
			b.ReportMetric(float64((cpu1[i]-cpu0[i]).Microseconds())/float64(b.N), name+"_cpu_us/call")
		}
		slices.Sort(d)
		slices.Sort(r)
		slices.Sort(g)
		slices.Sort(w)
		q := func(s []time.Duration, p float64) float64 {
			return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(q(d, 0.5), "direct_p50_us")
		b.ReportMetric(q(g, 0.5), "gateway_p50_us")
		b.ReportMetric(q(g, 0.5)-q(d, 0.5), "added_p50_us")
		b.ReportMetric(q(d, 0.99), "direct_p99_us")
		b.ReportMetric(q(g, 0.99), "gateway_p99_us")
		b.ReportMetric(q(g, 0.99)-q(d, 0.99), "added_p99_us")
		b.ReportMetric(q(r, 0.5), "relay_p50_us")
		b.ReportMetric(q(r, 0.99), "relay_p99_us")
		b.ReportMetric(q(g, 0.5)-q(r, 0.5), "over_relay_p50_us")
		b.ReportMetric(q(g, 0.99)-q(r, 0.99), "over_relay_p99_us")
		b.ReportMetric(q(w, 0.5), "wasm_p50_us")
		b.ReportMetric(q(w, 0.99), "wasm_p99_us")
		b.ReportMetric(q(w, 0.5)-q(d, 0.5), "wasm_added_p50_us")
		b.ReportMetric(q(w, 0.99)-q(d, 0.99), "wasm_added_p99_us")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("throughput16", func(b *testing.B) {
		const callers = 16
		// rounds: the four paths take turns, a tenth of b.N calls each, so
		// that load from outside the benchmark, which comes and goes on a
		// shared machine, falls on all four alike.
		const rounds = 10
		run := func(cs *mcp.ClientSession, name string, n int) time.Duration {
			var left atomic.Int64
			left.Store(int64(n))
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
			return time.Since(t0)
		}
		var d, r, g, w time.Duration
		for i := range rounds {
			n := b.N / rounds
			if i < b.N%rounds {
				n++
			}
			d += run(direct, "echo", n)
			r += run(relay, "echo", n)
			g += run(gateway, "demo__echo", n)
			w += run(wasm, "demo__echo", n)
		}
		b.StopTimer()
		perSecond := func(t time.Duration) float64 { return float64(b.N) / t.Seconds() }
		b.ReportMetric(perSecond(d), "direct_calls/s")
		b.ReportMetric(perSecond(r), "relay_calls/s")
		b.ReportMetric(perSecond(g), "gateway_calls/s")
		b.ReportMetric(perSecond(w), "wasm_calls/s")
		b.ReportMetric(d.Seconds()/g.Seconds(), "gateway/direct")
		b.ReportMetric(d.Seconds()/w.Seconds(), "wasm/direct")
		b.ReportMetric(d.Seconds()/r.Seconds(), "relay/direct")
		b.ReportMetric(0, "ns/op")
	})
}

// failureContext says what a failed call's processes left behind: the last
// lines of stderr, and the last decision log event that denied or failed.
func failureContext(stderrPath, logPath string) string {
	var out strings.Builder
	if data, err := os.ReadFile(stderrPath); err == nil {
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&out, "stderr (last %d lines):\n  %s\n", min(len(lines), 20), strings.Join(lines[max(0, len(lines)-20):], "\n  "))
	}
	if data, err := os.ReadFile(logPath); err == nil {
		var last string
		for line := range strings.Lines(string(data)) {
			if !strings.Contains(line, `"allow":true`) {
				last = line
			}
		}
		if last != "" {
			fmt.Fprintf(&out, "last decision log event not allowed:\n  %s", last)
		}
	}
	return out.String()
}

// processCPU is the user+system CPU time each process has used so far
// (children not included), from /proc/<pid>/stat.
func processCPU(b *testing.B, pids ...int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the parenthesised command name: state is field 3,
		// utime and stime fields 14 and 15, in clock ticks.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		var ticks int64
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			ticks += n
		}
		out[i] = time.Duration(ticks) * time.Second / clockTicks
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on Linux.
const clockTicks = 100
