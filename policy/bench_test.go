package policy_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// BenchmarkDecisionLogOverhead measures, in the same run and interleaved
// call by call, a tools/call decision without logging (input encoding and
// evaluation, what Decide does before it logs) and the same decision through
// Decide with a file log under the default fsync policy. It reports the p50
// of each and the p50 the log adds (p50_added_ns); `make bench` runs it.
func BenchmarkDecisionLogOverhead(b *testing.B) {
	for _, sync := range []policy.SyncPolicy{policy.SyncInterval, policy.SyncAlways} {
		b.Run("fsync="+string(sync), func(b *testing.B) {
			ctx := context.Background()
			engine, err := policy.NewRegoEngine(ctx, rego.Default(), serverData)
			if err != nil {
				b.Fatal(err)
			}
			l, err := policy.OpenDecisionLog(filepath.Join(b.TempDir(), "decisions.log"), policy.DecisionLogOptions{
				Labels: map[string]string{"id": "bench", "version": "bench"}, Revision: engine.Revision(), Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			d := policy.NewDecider(engine, l)
			in := input(policy.ActionToolsCall, "read_file", map[string]any{"path": "notes/today.txt", "limit": 100})
			in.Tool.Description = "Reads a file under the served root."
			in.Tool.InputSchema = map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}

			off := make([]time.Duration, 0, b.N)
			on := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				doc, err := json.Marshal(in)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := engine.Evaluate(ctx, doc); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if !d.Decide(ctx, in).Allow {
					b.Fatal("denied")
				}
				off, on = append(off, t1.Sub(t0)), append(on, time.Since(t1))
			}
			b.StopTimer()
			p50Off, p50On := median(off), median(on)
			b.ReportMetric(float64(p50Off.Nanoseconds()), "p50_off_ns")
			b.ReportMetric(float64(p50On.Nanoseconds()), "p50_on_ns")
			b.ReportMetric(float64((p50On - p50Off).Nanoseconds()), "p50_added_ns")
		})
	}
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
