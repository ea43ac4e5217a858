package rego

import (
	"context"
	"testing"
)

// BenchmarkDecisionToolsCall measures one tools/call decision of the default
// policy, from the JSON input bytes to the decision object.
func BenchmarkDecisionToolsCall(b *testing.B) {
	q := prepare(b, Default())
	in := input("tools/call", "files", "read_file", map[string]any{"path": "notes/today.md", "max_bytes": 4096})
	ctx := context.Background()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		d, defined, err := q.Eval(ctx, in)
		if err != nil || !defined || d.(map[string]any)["allow"] != true {
			b.Fatalf("Eval = %v, %v, %v", d, defined, err)
		}
	}
}
