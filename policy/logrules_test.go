package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

func TestMaskRuleHasOPASemantics(t *testing.T) {
	p := policyDir(t, map[string]string{
		"p.rego": "package mcp.warden\n\ndecision := {\"allow\": true, \"note\": \"n\"}\n",
		"log.rego": `package system.log

# The mask sees the unmasked event: it can decide on argument values.
mask contains "/input/arguments/password" if input.input.arguments.password
mask contains {"op": "upsert", "path": "/input/arguments/token", "value": "***"}
mask contains "/result/note"
mask contains "/input/arguments/absent"
`,
	})
	d, buf := newDecider(t, p, nil, policy.DecisionLogOptions{})
	dec := d.Decide(context.Background(), input(policy.ActionToolsCall, "x", map[string]any{
		"password": "hunter2", "token": "abc", "path": "a.txt",
	}))
	assert.True(t, dec.Allow)
	assert.Equal(t, "n", dec.Extra["note"], "masking the log never changes the decision")

	ev := events(t, buf)[0]
	assert.Equal(t, map[string]any{"token": "***", "path": "a.txt"}, ev["input"].(map[string]any)["arguments"])
	assert.NotContains(t, ev["result"], "note")
	assert.ElementsMatch(t, []any{"/input/arguments/password", "/result/note"}, ev["erased"], "undefined paths are ignored")
	assert.Equal(t, []any{"/input/arguments/token"}, ev["masked"])
	assert.NotContains(t, buf.String(), "hunter2")
}

func TestDropRuleSkipsEventsAndKeepsTheChain(t *testing.T) {
	p := policyDir(t, map[string]string{
		"p.rego":   "package mcp.warden\n\ndecision := {\"allow\": true}\n",
		"log.rego": "package system.log\n\ndrop if input.input.tool.upstream_name == \"noisy\"\n",
	})
	engine, err := policy.NewRegoEngine(context.Background(), p, nil)
	require.NoError(t, err)
	rules, err := policy.NewLogRules(context.Background(), p, nil)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{Rules: rules, Sync: policy.SyncAlways})
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	for _, tool := range []string{"a", "noisy", "b", "noisy", "c"} {
		assert.True(t, d.Decide(context.Background(), input(policy.ActionToolsCall, tool, nil)).Allow, "dropping the event keeps the decision")
	}
	require.NoError(t, l.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	evs := events(t, bytes.NewBuffer(b))
	require.Len(t, evs, 3)
	for _, ev := range evs {
		assert.NotEqual(t, "noisy", ev["input"].(map[string]any)["tool"].(map[string]any)["upstream_name"])
	}
	s, err := policy.VerifyDecisionLog([]string{path}, true)
	require.NoError(t, err)
	assert.Equal(t, 3, s.Records)
}

func TestFailingMaskRuleErasesInputAndResult(t *testing.T) {
	p := policyDir(t, map[string]string{
		"p.rego":   "package mcp.warden\n\ndecision := {\"allow\": true}\n",
		"log.rego": "package system.log\n\nmask contains \"/labels/id\"\n",
	})
	d, buf := newDecider(t, p, nil, policy.DecisionLogOptions{})
	assert.True(t, d.Decide(context.Background(), input(policy.ActionToolsCall, "x", map[string]any{"k": "secret-ish"})).Allow)
	ev := events(t, buf)[0]
	assert.Nil(t, ev["input"])
	assert.Equal(t, []any{"/input", "/result"}, ev["erased"])
	assert.Contains(t, ev["custom"].(map[string]any)["mask_error"], "not under /input, /result or /nd_builtin_cache")
	assert.NotContains(t, buf.String(), "secret-ish")
}

func TestUnwritableLogFailsOpenOnlyWhenConfigured(t *testing.T) {
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{FailOpen: true})
	require.NoError(t, err)
	require.NoError(t, l.Close()) // every write now fails
	d := policy.NewDecider(engine, l)
	assert.True(t, d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil)).Allow)
	assert.False(t, d.Decide(context.Background(), input(policy.ActionToolsCall, "delete", nil)).Allow,
		"fail-open keeps the policy's own denials")
}

func TestDecisionLogRotatesBySizeAndVerifies(t *testing.T) {
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{MaxBytes: 4096, Sync: policy.SyncNever})
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	for range 30 {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
	}
	require.NoError(t, l.Close())
	rotated, err := filepath.Glob(path + ".*")
	require.NoError(t, err)
	require.NotEmpty(t, rotated)
	s, err := policy.VerifyDecisionLog(append(rotated, path), true)
	require.NoError(t, err)
	assert.Equal(t, 30, s.Records)

	// A hash kept from an earlier verification may lie in a file retention
	// removed, as long as the chain continues from it.
	first, err := policy.VerifyDecisionLog(rotated[:1], true)
	require.NoError(t, err)
	rest := append(rotated[1:], path)
	_, err = policy.VerifyDecisionLog(rest, false, first.LastHash, s.LastHash)
	require.NoError(t, err)
	_, err = policy.VerifyDecisionLog(rest[:len(rest)-1], false, s.LastHash)
	var p *policy.LogProblem
	require.ErrorAs(t, err, &p, "the newest file gone: the kept head is missing")
	assert.Equal(t, "truncated", p.Kind)
}

// Closing the log reports its last hash, which audit verify can then
// require the chain to contain.
func TestDecisionLogReportsItsLastHashOnClose(t *testing.T) {
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	var oplog bytes.Buffer
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{Logger: slog.New(slog.NewTextHandler(&oplog, nil))})
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	for range 3 {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
	}
	require.NoError(t, l.Close())
	s, err := policy.VerifyDecisionLog([]string{path}, true)
	require.NoError(t, err)
	assert.Contains(t, oplog.String(), `msg="decision log closed" last_hash=`+s.LastHash)
}

// A policy calling non-deterministic builtins has their results in its
// events' nd_builtin_cache, as OPA logs them, with either engine and in
// list events per item. Under the default mask, which erases arguments,
// calls with arguments are erased too (they may hold them); a mask rule
// can remove parts of it.
func TestEventsRecordNondeterministicBuiltins(t *testing.T) {
	p := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": true, "at": time.now_ns()} if not input.arguments.seed

decision := {"allow": true, "n": rand.intn(input.arguments.seed, 1000)} if input.arguments.seed
`})
	ctx := context.Background()
	regoEngine, err := policy.NewRegoEngine(ctx, p, nil)
	require.NoError(t, err)
	for name, e := range map[string]policy.Engine{"rego": regoEngine, "wasm": newWasmEngine(t, p, nil, policy.WasmOptions{})} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			d := policy.NewDecider(e, policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}))
			dec := d.Decide(ctx, input(policy.ActionToolsCall, "x", map[string]any{"path": "a"}))
			require.True(t, dec.Allow)
			d.Decide(ctx, input(policy.ActionToolsCall, "x", map[string]any{"seed": "secret-seed"}))
			d.DecideExposure(ctx, []policy.Input{input(policy.ActionToolsList, "x", nil), input(policy.ActionToolsList, "y", nil)})
			evs := events(t, &buf)
			require.Len(t, evs, 3)

			at := dec.Extra["at"].(json.Number)
			assert.Contains(t, strings.SplitN(buf.String(), "\n", 2)[0], `"nd_builtin_cache":{"time.now_ns":{"[]":`+string(at)+`}}`,
				"the value the decision saw, exactly")
			assert.NotContains(t, evs[1], "nd_builtin_cache", "a call with arguments, arguments erased")
			assert.Contains(t, evs[1]["erased"], "/nd_builtin_cache")
			assert.NotContains(t, buf.String(), "secret-seed")
			for _, item := range evs[2]["result"].([]any) {
				assert.Contains(t, item.(map[string]any)["nd_builtin_cache"], "time.now_ns")
			}
		})
	}

	masked := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": true, "n": rand.intn(input.arguments.seed, 1000), "at": time.now_ns()}
`, "log.rego": `package system.log

mask contains "/input/arguments/seed"
mask contains "/nd_builtin_cache/rand.intn"
`})
	d, buf := newDecider(t, masked, nil, policy.DecisionLogOptions{})
	require.True(t, d.Decide(ctx, input(policy.ActionToolsCall, "x", map[string]any{"seed": "secret-seed"})).Allow)
	ev := events(t, buf)[0]
	assert.Equal(t, []any{"time.now_ns"}, mapKeys(ev["nd_builtin_cache"]), "the mask rule removed rand.intn")
	assert.ElementsMatch(t, []any{"/input/arguments/seed", "/nd_builtin_cache/rand.intn"}, ev["erased"])
	assert.NotContains(t, buf.String(), "secret-seed")
}

func mapKeys(v any) []any {
	var keys []any
	for k := range v.(map[string]any) {
		keys = append(keys, k)
	}
	return keys
}
