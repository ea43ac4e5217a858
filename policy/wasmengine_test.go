package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// newWasmEngine compiles p to Wasm and makes an engine of it, closed at the
// end of the test.
func newWasmEngine(t testing.TB, p *rego.Policy, data map[string]any, opts policy.WasmOptions) policy.Engine {
	t.Helper()
	ctx := context.Background()
	wp, err := policy.CompileWasm(ctx, p)
	require.NoError(t, err)
	if opts.CacheDir == "" {
		opts.CacheDir = "-"
	}
	e, err := policy.NewWasmEngine(ctx, wp, data, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.(interface{ Close() error }).Close()) })
	return e
}

// differentialData exercises every branch of the library: globs, blocks,
// malformed filters, servers without one.
var differentialData = map[string]any{"warden": map[string]any{"servers": map[string]any{
	"files":      map[string]any{"allow": []any{"read_*", "list_*"}, "block": []any{"read_secret*"}},
	"exact":      map[string]any{"allow": []any{"echo"}},
	"open":       map[string]any{"allow": []any{"*"}},
	"walled":     map[string]any{"allow": []any{"*"}, "block": []any{"*"}},
	"closed":     map[string]any{"allow": []any{}},
	"blockless":  map[string]any{"block": []any{}},
	"misblocked": map[string]any{"allow": []any{"*"}, "block": "echo"},
	"objblocked": map[string]any{"allow": []any{"*"}, "block": map[string]any{"x": "echo"}},
	"stringy":    "*",
	"badglob":    map[string]any{"allow": []any{"*"}, "block": []any{"[unclosed", 7}},
	"demo":       map[string]any{"allow": []any{"*note*", "add", "echo", "{get,put}_*"}, "block": []any{"delete_?ote"}},
}}}

// randomInput is a policy input document from a small vocabulary, with
// random omissions and wrong types, so that every rule sees both its cases.
func randomInput(r *rand.Rand) []byte {
	pick := func(xs ...any) any { return xs[r.IntN(len(xs))] }
	in := map[string]any{
		"action":    pick("tools/call", "tools/call", "tools/list", "tools/list", "resources/read", "", 7),
		"principal": map[string]any{"id": pick("alice", "bob", ""), "claims": map[string]any{}, "transport": pick("stdio", "http", "api")},
		"server": map[string]any{
			"name":        pick("files", "exact", "open", "walled", "closed", "blockless", "misblocked", "objblocked", "stringy", "badglob", "demo", "unknown"),
			"command":     "/bin/true",
			"confinement": map[string]any{"process_group": true},
		},
		"tool": map[string]any{
			"name":          "x__y",
			"upstream_name": pick("read_file", "read_secrets", "list_dir", "write_file", "echo", "add", "read_note", "delete_note", "get_x", "put_y.z", "a.b", "", "*", 3, "<x&y>", `q"uote\\`, "é\u2028", []any{"x"}),
			"sha256":        strings.Repeat("0", 64),
		},
		"request_id": fmt.Sprint(r.IntN(1000)),
		"time":       "2026-01-01T00:00:00Z",
	}
	if in["action"] == "tools/call" || r.IntN(4) == 0 {
		in["arguments"] = map[string]any{"name": pick("today.md", "private/x", "/private", "./private", "..", "a/../b", "private", 42, nil, ""), "n": r.IntN(10)}
	}
	switch r.IntN(12) {
	case 0:
		delete(in, "tool")
	case 1:
		delete(in, "server")
	case 2:
		in["tool"] = "not an object"
	}
	b, _ := json.Marshal(in)
	return b
}

// The Wasm engine decides exactly as the rego engine: the same result
// object (or the same undefinedness, or both an error) on every input.
func TestWasmEngineDecidesAsRegoEngine(t *testing.T) {
	const inputsPerPolicy = 10_000
	ctx := context.Background()
	for name, p := range map[string]*rego.Policy{"Default": rego.Default(), "Demo": rego.Demo()} {
		t.Run(name, func(t *testing.T) {
			regoEngine, err := policy.NewRegoEngine(ctx, p, differentialData)
			require.NoError(t, err)
			wasmEngine := newWasmEngine(t, p, differentialData, policy.WasmOptions{})
			require.Equal(t, regoEngine.Revision(), wasmEngine.Revision())
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			seen := map[string]int{}
			for i := range inputsPerPolicy {
				in := randomInput(r)
				want, wantErr := regoEngine.Evaluate(ctx, in)
				got, gotErr := wasmEngine.Evaluate(ctx, in)
				if (wantErr == nil) != (gotErr == nil) {
					t.Fatalf("input %d %s: rego error %v, wasm error %v", i, in, wantErr, gotErr)
				}
				require.Equal(t, want, got, "input %d: %s", i, in)
				if m, ok := got.(map[string]any); ok {
					seen[fmt.Sprint(m["allow"], " ", m["hidden"] == true, " ", strings.SplitN(fmt.Sprint(m["reason"]), " ", 2)[0])]++
				}
			}
			// The inputs reached allowed, denied, hidden and denial outcomes.
			t.Logf("outcomes: %v", seen)
			require.GreaterOrEqual(t, len(seen), 4)
		})
	}
}

func TestWasmEngineRunawayPolicyDeniesAndKeepsServing(t *testing.T) {
	p := policyDir(t, map[string]string{"p.rego": `package mcp.warden
decision := {"allow": true} if {
	input.principal.id == "alice"
	some a in numbers.range(1, 30000)
	some b in numbers.range(1, 30000)
	some c in numbers.range(1, 30000)
	a == b + c + 100000
}
decision := {"allow": true} if input.principal.id == "bob"
decision := {"allow": true, "n": n} if {
	input.principal.id == "carol"
	n := count([[a, b] | some a in input.arguments.xs; some b in input.arguments.xs])
}
`})
	ctx := context.Background()
	xs := make([]any, 3000)
	for i := range xs {
		xs[i] = i
	}
	for _, tc := range []struct {
		who, want string
		opts      policy.WasmOptions
	}{
		{"alice", "policy evaluation timed out", policy.WasmOptions{Instances: 1, Timeout: 100 * time.Millisecond, MemoryLimitPages: 16384}},
		{"carol", "policy evaluation exceeded the memory limit", policy.WasmOptions{Instances: 1, Timeout: 10 * time.Second, MemoryLimitPages: 64}},
	} {
		t.Run(tc.want, func(t *testing.T) {
			e := newWasmEngine(t, p, nil, tc.opts)
			var buf bytes.Buffer
			d := policy.NewDecider(e, policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}))
			in := input(policy.ActionToolsCall, "read_file", map[string]any{"xs": xs})
			in.Principal.ID = tc.who
			dec := d.Decide(ctx, in)
			assert.False(t, dec.Allow)
			assert.Contains(t, dec.Reason, tc.want)

			in.Principal.ID, in.Arguments = "bob", nil
			dec = d.Decide(ctx, in)
			assert.True(t, dec.Allow, "the replaced instance serves: %s", dec.Reason)

			evs := events(t, &buf)
			require.Len(t, evs, 2)
			assert.Contains(t, evs[0]["error"].(map[string]any)["message"], tc.want)
		})
	}
}
