package policy_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
)

// TestCallDecisionsCachedByWhatThePolicyReads: a second tools/call whose
// input differs only in what the policy does not read gets the first
// one's decision without an evaluation, and is logged in full like any
// other, with metrics.cache_hits 1; a call that differs in what the
// policy reads is evaluated.
func TestCallDecisionsCachedByWhatThePolicyReads(t *testing.T) {
	for name, newEngine := range defaultEngines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var buf bytes.Buffer
			d := policy.NewDecider(newEngine(t), policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}))
			call := func(tool, requestID string, args map[string]any) policy.Decision {
				in := input(policy.ActionToolsCall, tool, args)
				in.RequestID = requestID
				return d.Decide(ctx, in)
			}
			first := call("read_file", "1", map[string]any{"path": "a"})
			again := call("read_file", "2", map[string]any{"path": "b"}) // the library reads no arguments
			secret := call("read_secret", "3", nil)
			secretAgain := call("read_secret", "4", nil)
			hidden := call("delete", "5", nil)
			hiddenAgain := call("delete", "6", nil)

			assert.True(t, first.Allow)
			assert.Equal(t, first, again)
			assert.False(t, secret.Allow)
			assert.Equal(t, secret, secretAgain)
			assert.True(t, hidden.Hidden, "a tool the principal may not see")
			assert.Equal(t, hidden, hiddenAgain)

			evs := events(t, &buf)
			require.Len(t, evs, 6, "every decision is logged, from the cache or not")
			for i, ev := range evs {
				in := ev["input"].(map[string]any)
				assert.Equal(t, []string{"1", "2", "3", "4", "5", "6"}[i], in["request_id"], "each event has its own request's input")
				if i%2 == 0 {
					assert.Nil(t, cacheHits(t, ev), "event %d: evaluated", i)
				} else {
					assert.EqualValues(t, 1, cacheHits(t, ev), "event %d: from the cache", i)
				}
			}
			assert.Equal(t, evs[0]["result"], evs[1]["result"])
			assert.Equal(t, evs[4]["result"], evs[5]["result"])
		})
	}
}

// TestCallDecisionsCachedOnlyWhenTheSameQuestion: a policy that reads the
// arguments is asked again when they differ; one that reads a volatile
// field, calls a non-deterministic builtin, or fails, is evaluated on
// every call.
func TestCallDecisionsCachedOnlyWhenTheSameQuestion(t *testing.T) {
	ctx := context.Background()
	decide := func(t *testing.T, src string, inputs ...policy.Input) ([]policy.Decision, []map[string]any) {
		t.Helper()
		d, buf := newDecider(t, policyDir(t, map[string]string{"p.rego": src}), nil, policy.DecisionLogOptions{})
		var decisions []policy.Decision
		for _, in := range inputs {
			decisions = append(decisions, d.Decide(ctx, in))
		}
		return decisions, events(t, buf)
	}
	withArgs := func(path string) policy.Input {
		return input(policy.ActionToolsCall, "read_file", map[string]any{"path": path})
	}

	t.Run("arguments read", func(t *testing.T) {
		decisions, evs := decide(t, `package mcp.warden

decision := {"allow": input.arguments.path == "ok", "reason": "by path"}
`, withArgs("ok"), withArgs("no"), withArgs("ok"), withArgs("no"))
		assert.Equal(t, []bool{true, false, true, false}, []bool{decisions[0].Allow, decisions[1].Allow, decisions[2].Allow, decisions[3].Allow})
		assert.Equal(t, []any{nil, nil, float64(1), float64(1)}, []any{cacheHits(t, evs[0]), cacheHits(t, evs[1]), cacheHits(t, evs[2]), cacheHits(t, evs[3])})
	})
	t.Run("volatile field read", func(t *testing.T) {
		cutoff := time.Now().Add(time.Minute)
		before, after := withArgs("x"), withArgs("x")
		after.Time = policy.Timestamp(cutoff.Add(time.Hour))
		decisions, evs := decide(t, `package mcp.warden

decision := {"allow": input.time < "`+policy.Timestamp(cutoff)+`", "reason": "by time"}
`, before, after)
		assert.True(t, decisions[0].Allow)
		assert.False(t, decisions[1].Allow, "each call is evaluated: the decision follows the time")
		for _, ev := range evs {
			assert.Nil(t, cacheHits(t, ev))
		}
	})
	t.Run("non-deterministic builtin", func(t *testing.T) {
		_, evs := decide(t, `package mcp.warden

decision := {"allow": time.now_ns() > 0, "reason": "by the clock"}
`, withArgs("x"), withArgs("x"))
		for _, ev := range evs {
			assert.Nil(t, cacheHits(t, ev), "evaluated on every call")
			assert.NotNil(t, ev["nd_builtin_cache"], "what the clock said is in each event")
		}
	})
	t.Run("evaluation error", func(t *testing.T) {
		decisions, evs := decide(t, `package mcp.warden

decision := {"allow": true} if input.arguments.path == "x"

decision := {"allow": false} if input.arguments.path == "x"
`, withArgs("x"), withArgs("x"))
		for i, ev := range evs {
			assert.False(t, decisions[i].Allow, "fail closed")
			assert.NotNil(t, ev["error"], "the conflict is in the log")
			assert.Nil(t, cacheHits(t, ev), "a failed evaluation is not reused")
		}
	})
}

// TestEvaluationRunnerRunsEvaluationsOnly: a Decider given an evaluation
// runner runs each evaluation through it, and nothing else: a decision
// served from the cache is made and logged on the caller's goroutine.
func TestEvaluationRunnerRunsEvaluationsOnly(t *testing.T) {
	for name, newEngine := range defaultEngines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var buf bytes.Buffer
			runs := 0
			d := policy.NewDecider(newEngine(t), policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{}),
				policy.WithEvaluationRunner(func(f func()) { runs++; f() }))
			first := d.Decide(ctx, input(policy.ActionToolsCall, "read_file", nil))
			assert.True(t, first.Allow)
			assert.Equal(t, 1, runs, "the evaluation ran through the runner")
			assert.Equal(t, first, d.Decide(ctx, input(policy.ActionToolsCall, "read_file", nil)))
			assert.Equal(t, 1, runs, "a cached decision needs no evaluation")
			assert.False(t, d.Decide(ctx, input(policy.ActionToolsCall, "delete", nil)).Allow)
			assert.Equal(t, 2, runs)
			assert.Equal(t, 3, bytes.Count(buf.Bytes(), []byte("\n")), "every decision logged")
		})
	}
}
