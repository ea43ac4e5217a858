package policy

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/rego"
)

// BenchmarkDecisionLogOverhead measures, in the same run and interleaved
// call by call, a tools/call decision without logging — Decider.evaluate,
// exactly what Decide does before it logs (input encoding, evaluation,
// reading the decision) — and the same decision through Decide with a file
// log under each fsync policy (the Decider's call cache off, so that both
// evaluate). It reports the p50 of each and the p50 the
// log adds (p50_added_ns); `make bench-log` runs it.
func BenchmarkDecisionLogOverhead(b *testing.B) {
	data := map[string]any{"warden": map[string]any{"servers": map[string]any{
		"files": map[string]any{"allow": []any{"read_*", "list_*"}, "block": []any{"read_secret*"}},
	}}}
	for _, sync := range []SyncPolicy{SyncInterval, SyncAlways} {
		b.Run("fsync="+string(sync), func(b *testing.B) {
			ctx := context.Background()
			engine, err := NewRegoEngine(ctx, rego.Default(), data)
			if err != nil {
				b.Fatal(err)
			}
			l, err := OpenDecisionLog(filepath.Join(b.TempDir(), "decisions.log"), DecisionLogOptions{
				Labels: map[string]string{"id": "bench", "version": "bench"}, Revision: engine.Revision(), Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			d := NewDecider(engine, l)
			d.calls = nil // Decide evaluates every time, as the baseline does
			in := Input{
				Action:    ActionToolsCall,
				Principal: Principal{ID: "alice", Transport: "api", AuthMethod: "none"},
				Server:    Server{Name: "files", Command: "files-server"},
				Tool: &Tool{Name: "files__read_file", UpstreamName: "read_file", SHA256: strings.Repeat("0", 64),
					Description: "Reads a file under the served root.",
					InputSchema: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}},
				Arguments: map[string]any{"path": "notes/today.txt", "limit": 100},
				Time:      Timestamp(time.Now()),
			}

			off := make([]time.Duration, 0, b.N)
			on := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if dec, err, _ := d.evaluate(ctx, in, nil, nil); err != nil || !dec.Allow {
					b.Fatal("denied", err)
				}
				t1 := time.Now()
				if !d.Decide(ctx, in).Allow {
					b.Fatal("denied")
				}
				off, on = append(off, t1.Sub(t0)), append(on, time.Since(t1))
			}
			b.StopTimer()
			p50Off, p50On := p50(off), p50(on)
			b.ReportMetric(float64(p50Off.Nanoseconds()), "p50_off_ns")
			b.ReportMetric(float64(p50On.Nanoseconds()), "p50_on_ns")
			b.ReportMetric(float64((p50On - p50Off).Nanoseconds()), "p50_added_ns")
		})
	}
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
