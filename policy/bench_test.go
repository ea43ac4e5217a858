package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	_ "github.com/open-policy-agent/opa/v1/features/wasm" // OPA's own Wasm target, baseline (b)
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

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
// policy from the JSON bytes of the whole input to the decision value,
// through (ours) mcp-warden's Wasm host, (opa_wasm) OPA's
// rego.Target("wasm"), and (opa_topdown) OPA's topdown prepared query as
// rego.Prepare sets it up (input decoded straight to AST). All three parse
// the same whole document: this measures the engines alone, without the
// input reduction the Decider does (see
// BenchmarkToolsCallDecisionFromInput). `make bench` prints the medians and
// the ratios ours/opa_wasm and ours/opa_topdown.
func BenchmarkToolsCallDecision(b *testing.B) {
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		e := newWasmEngine(b, rego.Default(), benchData, policy.WasmOptions{Instances: 1})
		b.ReportAllocs()
		for b.Loop() {
			v, err := e.Evaluate(ctx, benchInput)
			requireAllowed(b, v, err)
		}
	})
	b.Run("opa_wasm", func(b *testing.B) {
		pq := prepareOPAWasm(b)
		b.ReportAllocs()
		for b.Loop() {
			var input any
			noError(b, util.UnmarshalJSON(benchInput, &input))
			rs, err := pq.Eval(ctx, oparego.EvalInput(input))
			noError(b, err)
			requireAllowed(b, rs[0].Expressions[0].Value, nil)
		}
	})
	b.Run("opa_topdown", func(b *testing.B) {
		e, err := policy.NewRegoEngine(ctx, rego.Default(), benchData)
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			v, err := e.Evaluate(ctx, benchInput)
			requireAllowed(b, v, err)
		}
	})
}

// BenchmarkToolsCallDecisionFromInput is the same decision on the same
// input (benchInput decoded into a policy.Input), from the Input to the
// decision value, as the gateway makes it: (ours) the Input reduced to
// what the policy reads (as the Decider encodes it) and evaluated on
// mcp-warden's Wasm host; (opa_wasm) and (opa_topdown) the whole Input
// encoded to JSON and evaluated by OPA's rego.Target("wasm") and topdown
// prepared query, which read the whole document. (rego_pruned) is
// mcp-warden's rego engine given the reduced Input, as the Decider runs it
// with engine: rego, for reference.
func BenchmarkToolsCallDecisionFromInput(b *testing.B) {
	ctx := context.Background()
	var in policy.Input
	require.NoError(b, json.Unmarshal(benchInput, &in))
	b.Run("ours", func(b *testing.B) {
		e := newWasmEngine(b, rego.Default(), benchData, policy.WasmOptions{Instances: 1})
		b.ReportAllocs()
		for b.Loop() {
			doc, err := policy.EncodeInputFor(e, in)
			noError(b, err)
			v, err := e.Evaluate(ctx, doc)
			requireAllowed(b, v, err)
		}
	})
	b.Run("opa_wasm", func(b *testing.B) {
		pq := prepareOPAWasm(b)
		b.ReportAllocs()
		for b.Loop() {
			doc, err := json.Marshal(in)
			noError(b, err)
			var input any
			noError(b, util.UnmarshalJSON(doc, &input))
			rs, err := pq.Eval(ctx, oparego.EvalInput(input))
			noError(b, err)
			requireAllowed(b, rs[0].Expressions[0].Value, nil)
		}
	})
	regoEngine, err := policy.NewRegoEngine(ctx, rego.Default(), benchData)
	require.NoError(b, err)
	b.Run("opa_topdown", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doc, err := json.Marshal(in)
			noError(b, err)
			v, err := regoEngine.Evaluate(ctx, doc)
			requireAllowed(b, v, err)
		}
	})
	b.Run("rego_pruned", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doc, err := policy.EncodeInputFor(regoEngine, in)
			noError(b, err)
			v, err := regoEngine.Evaluate(ctx, doc)
			requireAllowed(b, v, err)
		}
	})
}

// requireAllowed and noError check results inside benchmark loops without
// testify, whose b.Helper() walks the stack on every call and would add
// its cost to every engine's time.
func requireAllowed(b *testing.B, v any, err error) {
	noError(b, err)
	if m, ok := v.(map[string]any); !ok || m["allow"] != true {
		b.Fatalf("decision = %v, want allowed", v)
	}
}

func noError(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// prepareOPAWasm is the default policy prepared for OPA's
// rego.Target("wasm") with benchData, from the library's source files.
func prepareOPAWasm(b *testing.B) oparego.PreparedEvalQuery {
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
	pq, err := oparego.New(opts...).PrepareForEval(context.Background())
	require.NoError(b, err)
	return pq
}

// BenchmarkToolsListExposure is one tools/list of 1,000 tools for one
// principal through Decider.DecideExposure, logged to a file under the
// default fsync policy, for each engine: cold (a new Decider, so an empty
// cache: every tool evaluated) and warm (the same list again, later and
// with new request ids: every tool from the cache). Each engine is set up
// as the gateway sets it up, so a cold list is evaluated by one worker per
// CPU. `make bench-list` runs it.
func BenchmarkToolsListExposure(b *testing.B) {
	ctx := context.Background()
	data := map[string]any{"warden": map[string]any{"servers": map[string]any{
		"files": map[string]any{"allow": []any{"read_*", "list_*", "tool_1*"}, "block": []any{"read_secret*"}},
	}}}
	inputs := make([]policy.Input, 1000)
	for i := range inputs {
		name := fmt.Sprintf("tool_%d", i)
		switch i % 4 {
		case 1:
			name = fmt.Sprintf("read_%d", i)
		case 2:
			name = fmt.Sprintf("read_secret_%d", i)
		}
		def := map[string]any{"name": name, "description": "Tool number " + name + " of the benchmark server.",
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}
		sum, err := policy.DefinitionHash(def)
		require.NoError(b, err)
		inputs[i] = input(policy.ActionToolsList, name, nil)
		inputs[i].Tool.Description, inputs[i].Tool.InputSchema, inputs[i].Tool.SHA256 = def["description"].(string), def["inputSchema"], sum
	}
	exposed := func(b *testing.B, decisions []policy.Decision) {
		n := 0
		for _, d := range decisions {
			if d.Allow {
				n++
			}
		}
		if n != 250+55 { // read_<1 mod 4>, and tool_1* among tool_<0 or 3 mod 4>
			b.Fatalf("%d tools exposed, want 305", n)
		}
	}
	engines := map[string]func(b *testing.B) policy.Engine{
		"ours": func(b *testing.B) policy.Engine {
			// As the gateway makes it: one instance per CPU.
			return newWasmEngine(b, rego.Default(), data, policy.WasmOptions{})
		},
		"opa_topdown": func(b *testing.B) policy.Engine {
			e, err := policy.NewRegoEngine(ctx, rego.Default(), data)
			require.NoError(b, err)
			return e
		},
	}
	for _, name := range []string{"ours", "opa_topdown"} {
		engine := engines[name](b)
		l, err := policy.OpenDecisionLog(filepath.Join(b.TempDir(), "decisions.log"), policy.DecisionLogOptions{
			Labels: map[string]string{"id": "bench", "version": "bench"}, Revision: engine.Revision()})
		require.NoError(b, err)
		b.Cleanup(func() { l.Close() })
		request := 0
		next := func() []policy.Input {
			request++
			at, id := policy.Timestamp(time.Now()), fmt.Sprint(request)
			for i := range inputs {
				inputs[i].Time, inputs[i].RequestID = at, id
			}
			return inputs
		}
		b.Run(name+"/cold", func(b *testing.B) {
			for b.Loop() {
				exposed(b, policy.NewDecider(engine, l).DecideExposure(ctx, next()))
			}
		})
		b.Run(name+"/warm", func(b *testing.B) {
			d := policy.NewDecider(engine, l)
			require.True(b, d.CachesExposure())
			d.DecideExposure(ctx, next())
			for b.Loop() {
				exposed(b, d.DecideExposure(ctx, next()))
			}
		})
	}
}
