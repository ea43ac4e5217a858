package policy_test

import (
	"context"
	"os"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	_ "github.com/open-policy-agent/opa/v1/features/wasm" // OPA's own Wasm target, baseline (b)
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// benchData and benchInput are one tools/call of the default policy that
// is allowed: every rule of the library is evaluated.
var benchData = map[string]any{"warden": map[string]any{"servers": map[string]any{
	"files": map[string]any{"allow": []any{"read_*", "list_*"}, "block": []any{"read_secret*"}},
}}}

var benchInput = []byte(`{"action":"tools/call","principal":{"id":"alice","claims":{},"transport":"stdio"},` +
	`"server":{"name":"files","command":"/bin/true","confinement":{"process_group":true}},` +
	`"tool":{"name":"files__read_file","upstream_name":"read_file","sha256":"0000000000000000000000000000000000000000000000000000000000000000"},` +
	`"arguments":{"path":"notes/today.md","max_bytes":4096},"request_id":"1","time":"2026-01-01T00:00:00Z"}`)

// BenchmarkToolsCallDecision is one tools/call decision of the default
// policy from the JSON input bytes to the decision value, through
// (ours) mcp-warden's Wasm host, (opa_wasm) OPA's rego.Target("wasm"), and
// (opa_topdown) OPA's topdown prepared query as rego.Prepare sets it up
// (input decoded straight to AST). `make bench` prints the medians and
// the ratios ours/opa_wasm and ours/opa_topdown.
func BenchmarkToolsCallDecision(b *testing.B) {
	ctx := context.Background()
	allowed := func(b *testing.B, v any) {
		if m, ok := v.(map[string]any); !ok || m["allow"] != true {
			b.Fatalf("decision = %v, want allowed", v)
		}
	}
	b.Run("ours", func(b *testing.B) {
		e := newWasmEngine(b, rego.Default(), benchData, policy.WasmOptions{Instances: 1})
		b.ReportAllocs()
		for b.Loop() {
			v, err := e.Evaluate(ctx, benchInput)
			require.NoError(b, err)
			allowed(b, v)
		}
	})
	b.Run("opa_wasm", func(b *testing.B) {
		var opts []func(*oparego.Rego)
		for _, path := range []string{"../rego/library/decision.rego", "../rego/library/exposure.rego"} {
			src, err := os.ReadFile(path)
			require.NoError(b, err)
			opts = append(opts, oparego.Module(path, string(src)))
		}
		opts = append(opts,
			oparego.Query(policy.Entrypoint),
			oparego.Target("wasm"),
			oparego.SetRegoVersion(ast.RegoV1),
			oparego.Store(inmem.NewFromObject(benchData)))
		pq, err := oparego.New(opts...).PrepareForEval(ctx)
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			var input any
			require.NoError(b, util.UnmarshalJSON(benchInput, &input))
			rs, err := pq.Eval(ctx, oparego.EvalInput(input))
			require.NoError(b, err)
			allowed(b, rs[0].Expressions[0].Value)
		}
	})
	b.Run("opa_topdown", func(b *testing.B) {
		e, err := policy.NewRegoEngine(ctx, rego.Default(), benchData)
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			v, err := e.Evaluate(ctx, benchInput)
			require.NoError(b, err)
			allowed(b, v)
		}
	})
}
