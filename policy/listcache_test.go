package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// listInputs is one tools/list of the named tools, all with one principal
// and server, as the gateway builds it.
func listInputs(tools []string, at time.Time, requestID string) []policy.Input {
	inputs := make([]policy.Input, len(tools))
	for i, name := range tools {
		inputs[i] = input(policy.ActionToolsList, name, nil)
		inputs[i].Time = policy.Timestamp(at)
		inputs[i].RequestID = requestID
		inputs[i].SessionID = "s-" + requestID
	}
	return inputs
}

func cacheHits(t *testing.T, ev map[string]any) any {
	t.Helper()
	return ev["metrics"].(map[string]any)["cache_hits"]
}

// defaultEngines make the default library with serverData on each engine.
var defaultEngines = map[string]func(t *testing.T) policy.Engine{
	"rego": func(t *testing.T) policy.Engine {
		e, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
		require.NoError(t, err)
		return e
	},
	"wasm": func(t *testing.T) policy.Engine {
		return newWasmEngine(t, rego.Default(), serverData, policy.WasmOptions{Instances: 2})
	},
}

func TestExposureCacheHitsMissesAndLogsEveryList(t *testing.T) {
	for name, newEngine := range defaultEngines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var buf bytes.Buffer
			d := policy.NewDecider(newEngine(t), policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}))
			require.True(t, d.CachesExposure(), "the library reads no volatile field")
			tools := []string{"read_file", "read_secret", "list", "delete"}
			want := map[string]bool{"read_file": true, "read_secret": false, "list": true, "delete": false}
			check := func(decisions []policy.Decision) {
				t.Helper()
				for i, dec := range decisions {
					assert.Equal(t, want[tools[i]], dec.Allow, tools[i])
					assert.NotEmpty(t, dec.Reason)
				}
			}

			first := d.DecideExposure(ctx, listInputs(tools, time.Now(), "1"))
			check(first)
			// Another request, later, in another session: same decisions, from the cache.
			second := d.DecideExposure(ctx, listInputs(tools, time.Now().Add(time.Hour), "2"))
			check(second)
			assert.Equal(t, first, second)
			// A changed definition (new sha256) and a new tool miss; the others hit.
			changed := listInputs(append(tools, "read_more"), time.Now(), "3")
			changed[0].Tool.SHA256 = "1" + changed[0].Tool.SHA256[1:]
			want["read_more"] = true
			tools = append(tools, "read_more")
			check(d.DecideExposure(ctx, changed))
			// Another principal misses everything.
			other := listInputs(tools, time.Now(), "4")
			for i := range other {
				other[i].Principal.ID = "bob"
			}
			check(d.DecideExposure(ctx, other))
			// A tool in a list decided with its arguments (not a list input the gateway makes) is never cached.
			withArgs := listInputs(tools[:1], time.Now(), "5")
			withArgs[0].Arguments = map[string]any{}
			check(d.DecideExposure(ctx, withArgs))

			evs := events(t, &buf)
			require.Len(t, evs, 5, "every list is logged, cached or not")
			assert.EqualValues(t, 0, cacheHits(t, evs[0]))
			assert.EqualValues(t, 4, cacheHits(t, evs[1]))
			assert.EqualValues(t, 3, cacheHits(t, evs[2]))
			assert.EqualValues(t, 0, cacheHits(t, evs[3]))
			assert.EqualValues(t, 0, cacheHits(t, evs[4]))
			// A repeated list is logged with the request's own ids, as a
			// reference to the earlier event that lists the same items and decisions.
			in := evs[1]["input"].(map[string]any)
			assert.Equal(t, "2", in["request_id"])
			assert.Equal(t, "s-2", in["session_id"])
			assert.Equal(t, "alice", in["principal"].(map[string]any)["id"])
			assert.NotContains(t, in, "tools")
			assert.Equal(t, map[string]any{"same_as": map[string]any{"decision_id": evs[0]["decision_id"], "hash": evs[0]["hash"]}},
				evs[1]["result"])
			// A hit in a list that differs is logged as an evaluation is: the tool, its decision and reason.
			in = evs[2]["input"].(map[string]any)
			assert.Equal(t, "3", in["request_id"])
			assert.Len(t, in["tools"], 5)
			results := evs[2]["result"].([]any)
			require.Len(t, results, 5)
			for i, r := range results {
				r := r.(map[string]any)
				assert.Equal(t, "files__"+tools[i], r["tool"])
				assert.Equal(t, want[tools[i]], r["allow"])
				assert.NotEmpty(t, r["reason"])
			}
		})
	}
}

func TestExposureCacheOffForPolicyReadingVolatileFields(t *testing.T) {
	ctx := context.Background()
	cutoff := time.Now().Add(time.Minute)
	for _, field := range []string{"time", "request_id", "session_id"} {
		t.Run(field, func(t *testing.T) {
			p := policyDir(t, map[string]string{"p.rego": fmt.Sprintf(`package mcp.warden

decision := {"allow": allow, "reason": "r"}

default allow := false

allow if input.%s < %q
`, field, map[string]string{"time": policy.Timestamp(cutoff), "request_id": "2", "session_id": "s-2"}[field])})
			e, err := policy.NewRegoEngine(ctx, p, nil)
			require.NoError(t, err)
			var buf bytes.Buffer
			d := policy.NewDecider(e, policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}))
			assert.False(t, d.CachesExposure())

			before := d.DecideExposure(ctx, listInputs([]string{"a"}, time.Now(), "1"))
			after := d.DecideExposure(ctx, listInputs([]string{"a"}, cutoff.Add(time.Hour), "3"))
			assert.True(t, before[0].Allow)
			assert.False(t, after[0].Allow, "each list is evaluated: the decision follows %s", field)
			for _, ev := range events(t, &buf) {
				assert.Nil(t, cacheHits(t, ev), "no cache, no cache_hits metric")
			}
		})
	}
	t.Run("prebuilt wasm", func(t *testing.T) {
		wp, err := policy.CompileWasm(ctx, rego.Default())
		require.NoError(t, err)
		prebuilt := &rego.WasmPolicy{Module: wp.Module, Entrypoints: wp.Entrypoints, Data: wp.Data, Revision: wp.Revision}
		e, err := policy.NewWasmEngine(ctx, prebuilt, serverData, policy.WasmOptions{CacheDir: "-", Instances: 1})
		require.NoError(t, err)
		defer e.(interface{ Close() error }).Close()
		d := policy.NewDecider(e, policy.NewDecisionLog(&bytes.Buffer{}, policy.DecisionLogOptions{}))
		assert.False(t, d.CachesExposure(), "a module whose source is unknown is never cached")
	})
}

func TestExposureCacheConcurrentLists(t *testing.T) {
	ctx := context.Background()
	d, buf := newDecider(t, rego.Default(), serverData, policy.DecisionLogOptions{})
	require.True(t, d.CachesExposure())
	tools := []string{"read_file", "read_secret", "list", "delete"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				inputs := listInputs(tools, time.Now(), fmt.Sprint(g*100+i))
				if i%5 == 0 {
					for j := range inputs {
						inputs[j].Principal.ID = fmt.Sprint("p", g, i)
					}
				}
				decisions := d.DecideExposure(ctx, inputs)
				assert.Equal(t, []bool{true, false, true, false},
					[]bool{decisions[0].Allow, decisions[1].Allow, decisions[2].Allow, decisions[3].Allow})
			}
		})
	}
	wg.Wait()
	assert.Len(t, events(t, buf), 160)
}

// TestRepeatedListsReferToTheirFullEventInTheSameFile: a repeated list is
// logged as a reference to the full event, never across a rotation; `audit
// verify` accepts the log, and names a repeat whose full event is gone.
func TestRepeatedListsReferToTheirFullEventInTheSameFile(t *testing.T) {
	ctx := context.Background()
	engine, err := policy.NewRegoEngine(ctx, rego.Default(), serverData)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{MaxBytes: 16 << 10, Sync: policy.SyncNever})
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	tools := []string{"read_file", "read_secret", "list", "delete"}
	for i := range 40 {
		decisions := d.DecideExposure(ctx, listInputs(tools, time.Now(), fmt.Sprint(i)))
		require.True(t, decisions[0].Allow)
		require.False(t, decisions[1].Allow)
	}
	require.NoError(t, l.Close())
	rotated, err := filepath.Glob(path + ".*")
	require.NoError(t, err)
	slices.Sort(rotated)
	files := append(rotated, path)
	require.GreaterOrEqual(t, len(files), 2, "the log rotated")
	s, err := policy.VerifyDecisionLog(files, true)
	require.NoError(t, err)
	assert.Equal(t, 40, s.Records)

	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var evs []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var ev map[string]any
			require.NoError(t, json.Unmarshal(line, &ev))
			evs = append(evs, ev)
		}
		_, full := evs[0]["result"].([]any)
		assert.True(t, full, "%s: the first list of a file is logged in full", f)
		for _, ev := range evs[1:] {
			assert.Equal(t, map[string]any{"same_as": map[string]any{"decision_id": evs[0]["decision_id"], "hash": evs[0]["hash"]}},
				ev["result"], "%s: later lists repeat the first", f)
			assert.EqualValues(t, len(tools), cacheHits(t, ev))
		}
	}

	// Without its first record (as if the file's head were cut off), the
	// file still continues a chain, but its repeats name a missing event.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.log")
	require.NoError(t, os.WriteFile(cut, b[bytes.IndexByte(b, '\n')+1:], 0o600))
	_, err = policy.VerifyDecisionLog([]string{cut}, false)
	var problem *policy.LogProblem
	require.ErrorAs(t, err, &problem)
	assert.Equal(t, 1, problem.Line)
	assert.Equal(t, "dangling reference", problem.Kind)
}

// A long list is evaluated by several workers (one per instance of the
// Wasm engine, one per CPU for topdown): every item still gets its own
// decision, the one Decide gives it, partly cached lists included.
func TestLongListDecidedItemByItem(t *testing.T) {
	ctx := context.Background()
	regoEngine, err := policy.NewRegoEngine(ctx, rego.Default(), differentialData)
	require.NoError(t, err)
	for name, e := range map[string]policy.Engine{
		"rego": regoEngine,
		"wasm": newWasmEngine(t, rego.Default(), differentialData, policy.WasmOptions{Instances: 3}),
	} {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			inputs := make([]policy.Input, 500)
			for i := range inputs {
				inputs[i] = randomInputValue(r)
				inputs[i].Action = policy.ActionToolsList
				inputs[i].Principal = policy.Principal{ID: "alice"}
			}
			log := policy.NewDecisionLog(io.Discard, policy.DecisionLogOptions{})
			single := policy.NewDecider(e, log)
			list := policy.NewDecider(e, log)
			// A few items cached first, so the workers skip hits.
			list.DecideExposure(ctx, inputs[100:110])
			got := list.DecideExposure(ctx, inputs)
			allowed := 0
			for i, in := range inputs {
				want := single.Decide(ctx, in)
				require.Equal(t, want, got[i], "item %d: %+v", i, in)
				if want.Allow {
					allowed++
				}
			}
			assert.Positive(t, allowed)
			assert.Less(t, allowed, len(inputs))
		})
	}
}
