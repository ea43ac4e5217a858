package policy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// decisionLogFile decides with p and data through a real Decider and
// file log, calling decide, and returns the log's path once it is closed.
func decisionLogFile(t *testing.T, p *rego.Policy, data map[string]any, decide func(d *policy.Decider)) string {
	t.Helper()
	ctx := context.Background()
	engine, err := policy.NewRegoEngine(ctx, p, data)
	require.NoError(t, err)
	rules, err := policy.NewLogRules(ctx, p, data)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{Revision: engine.Revision(), Rules: rules})
	require.NoError(t, err)
	decide(policy.NewDecider(engine, l))
	require.NoError(t, l.Close())
	return path
}

// replay replays files with p and data, collecting the findings.
func replay(t *testing.T, p *rego.Policy, data map[string]any, files ...string) (policy.ReplaySummary, []policy.ReplayFinding, error) {
	t.Helper()
	engine, err := policy.NewRegoEngine(context.Background(), p, data)
	require.NoError(t, err)
	var found []policy.ReplayFinding
	s, err := policy.ReplayDecisionLog(context.Background(), engine, files, func(f policy.ReplayFinding) { found = append(found, f) })
	return s, found, err
}

// serverDataBlocking is serverData with read_file blocked too.
var serverDataBlocking = map[string]any{"warden": map[string]any{"servers": map[string]any{
	"files": map[string]any{"allow": []any{"read_*", "list"}, "block": []any{"read_secret", "read_file"}},
}}}

// defaultTraffic is a little of everything the gateway logs with the
// default library: calls allowed, hidden and with arguments; a list in
// full, its repeat, and a list decided for list_changed routing.
func defaultTraffic(d *policy.Decider) {
	ctx := context.Background()
	d.Decide(ctx, input(policy.ActionToolsCall, "read_file", map[string]any{"path": "/etc/hosts"})) // line 1
	d.Decide(ctx, input(policy.ActionToolsCall, "read_secret", nil))                                // line 2
	d.Decide(ctx, input(policy.ActionToolsCall, "list", nil))                                       // line 3
	now := time.Now()
	tools := []string{"list", "read_file", "read_secret", "write_file"}
	d.DecideExposure(ctx, listInputs(tools, now, "1"))                  // line 4: in full
	d.DecideExposure(ctx, listInputs(tools, now.Add(time.Second), "2")) // line 5: a repeat of line 4
	routing := policy.WithEventNotes(ctx, map[string]any{"purpose": "list_changed_routing"})
	d.DecideExposure(routing, listInputs(tools[1:2], now, "")) // line 6
}

func TestReplayWithTheSamePolicyFindsEveryDecisionTheSame(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	log, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(log), `"same_as"`, "the second list is logged as a repeat")
	require.Contains(t, string(log), `"erased":["/input/arguments"]`)

	s, found, err := replay(t, rego.Default(), serverData, path)
	require.NoError(t, err)
	assert.Empty(t, found)
	assert.Equal(t, policy.ReplaySummary{Files: 1, Events: 6, Decisions: 3 + 4 + 4 + 1, Same: 12,
		Revision: rego.Default().Revision()}, s)
}

func TestReplayWithChangedDataReportsTheDecisionsThatDiffer(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	s, found, err := replay(t, rego.Default(), serverDataBlocking, path)
	require.NoError(t, err)
	assert.Equal(t, 12, s.Decisions)
	assert.Equal(t, 4, s.Differ, "read_file: its call, its item in the list, the repeat and the routing list")
	assert.Equal(t, 8, s.Same)
	assert.Empty(t, s.OtherRevisions, "data from the configuration is not part of the policy's revision")
	var lines []string
	for _, f := range found {
		assert.Equal(t, path, f.File)
		assert.Equal(t, "alice", f.Principal)
		assert.Contains(t, f.Item, "tool files__read_file")
		assert.Contains(t, f.Logged, `"allow":true`)
		assert.Contains(t, f.Replayed, `"allow":false`)
		lines = append(lines, f.String()[len(path):strings.Index(f.String(), " decision ")])
	}
	assert.Equal(t, []string{":1:", ":4:", ":5:", ":6:"}, lines)
	assert.Equal(t, policy.ActionToolsCall, found[0].Action)
	assert.Equal(t, "tool files__read_file (item 2 of 4)", found[1].Item)
	assert.Equal(t, policy.ActionToolsList, found[2].Action)
	assert.Regexp(t, `^.*decisions\.log:1: decision [0-9a-f-]{36} tools/call tool files__read_file principal "alice": logged \{"allow":true,"reason":"tool exposed[^"]*"\}, replayed \{"allow":false,"hidden":true,"reason":"unknown tool"\}$`, found[0].String())
}

func TestReplayWithAnotherRevisionSaysSoAndReplays(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	s, _, err := replay(t, rego.Demo(), serverData, path)
	require.NoError(t, err)
	assert.Equal(t, 12, s.Decisions, "replayed anyway")
	assert.Equal(t, []policy.ReplayRevision{{File: path, Revision: rego.Default().Revision(), Events: 6}}, s.OtherRevisions)
}

// argumentsPolicy denies calls whose path argument is under /etc.
var argumentsPolicy = map[string]string{"p.rego": `package mcp.warden

decision := {"allow": false, "reason": "no /etc"} if startswith(input.arguments.path, "/etc/")
else := {"allow": true}
`}

func TestReplayOfArgumentsErasedByTheDefaultMaskIsNotReplayable(t *testing.T) {
	p := policyDir(t, argumentsPolicy)
	path := decisionLogFile(t, p, nil, func(d *policy.Decider) {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", map[string]any{"path": "/etc/hosts"}))
		d.Decide(context.Background(), input(policy.ActionToolsCall, "list", nil)) // no arguments: nothing erased
	})
	s, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	assert.Equal(t, policy.ReplaySummary{Files: 1, Events: 2, Decisions: 2, Same: 1, NotReplayable: 1, Revision: p.Revision()}, s)
	require.Len(t, found, 1)
	assert.Equal(t, 1, found[0].Line)
	assert.Equal(t, "input/arguments erased by the log mask and read by the policy", found[0].NotReplayable)
	assert.Contains(t, found[0].String(), ": not replayable: input/arguments erased")

	// The default library reads no argument: the same log replays with it.
	s, _, err = replay(t, rego.Default(), serverData, path)
	require.NoError(t, err)
	assert.Equal(t, 0, s.NotReplayable)
}

func TestReplayOfArgumentsTheMaskKeptDecidesAgain(t *testing.T) {
	p := policyDir(t, map[string]string{"p.rego": argumentsPolicy["p.rego"], "log.rego": `package system.log

mask contains "/input/arguments/secret"
`})
	path := decisionLogFile(t, p, nil, func(d *policy.Decider) {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", map[string]any{"path": "/etc/hosts", "secret": "x"}))
	})
	s, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	assert.Empty(t, found, "the policy reads input.arguments.path; only arguments.secret was erased: %v", found)
	assert.Equal(t, 1, s.Same)
}

func TestReplayOfTimeDependentPolicyUsesTheLoggedTime(t *testing.T) {
	p := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": true, "reason": sprintf("decided at %d", [time.now_ns()])}
`})
	path := decisionLogFile(t, p, nil, func(d *policy.Decider) {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "list", map[string]any{"x": 1}))
		d.DecideExposure(context.Background(), listInputs([]string{"a", "b"}, time.Now(), "1"))
	})
	time.Sleep(2 * time.Millisecond)
	s, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	assert.Empty(t, found)
	assert.Equal(t, 3, s.Same, "the time each evaluation read is in its event, and replayed")
}

func TestReplayWithoutTheLoggedBuiltinResultsIsNotReplayable(t *testing.T) {
	// rand.intn's arguments may hold argument values: the default mask
	// erases the cache of a call with arguments.
	p := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": rand.intn(input.tool.name, 2) == 0}
`})
	path := decisionLogFile(t, p, nil, func(d *policy.Decider) {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "list", map[string]any{"x": 1}))
		d.Decide(context.Background(), input(policy.ActionToolsCall, "list", nil))
	})
	log, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(log), `"/nd_builtin_cache"`)
	s, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Same)
	require.Len(t, found, 1)
	assert.Equal(t, 1, found[0].Line)
	assert.Equal(t, "the policy calls rand.intn: the log mask erased the event's nd_builtin_cache, which held what it returned then", found[0].NotReplayable)

	// A new policy that reads the time: events logged without it hold no
	// time to replay with.
	q := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": time.now_ns() > 0}
`})
	s, found, err = replay(t, q, nil, path)
	require.NoError(t, err)
	assert.Equal(t, 2, s.NotReplayable)
	assert.Contains(t, found[1].NotReplayable, "the policy calls time.now_ns: the event's nd_builtin_cache does not hold")
}

func TestReplayOfEvaluationErrorsComparesThemAsErrors(t *testing.T) {
	conflict := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": true} if input.tool.upstream_name == "a"
decision := {"allow": false} if input.tool.upstream_name == "a"
decision := {"allow": true} if input.tool.upstream_name == "b"
`})
	path := decisionLogFile(t, conflict, nil, func(d *policy.Decider) {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "a", nil))
		d.Decide(context.Background(), input(policy.ActionToolsCall, "b", nil))
	})
	s, found, err := replay(t, conflict, nil, path)
	require.NoError(t, err)
	assert.Empty(t, found)
	assert.Equal(t, 2, s.Same)

	fixed := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": true}
`})
	s, found, err = replay(t, fixed, nil, path)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Differ)
	require.Len(t, found, 1)
	assert.Contains(t, found[0].Logged, `{"error":"evaluate data.mcp.warden.decision:`)
	assert.Equal(t, `{"allow":true}`, found[0].Replayed)
}

func TestReplayOfARepeatWhoseListIsNotInItsFile(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	log, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(log), "\n")
	cut := filepath.Join(t.TempDir(), "cut.log")
	require.NoError(t, os.WriteFile(cut, []byte(lines[4]), 0o600))
	s, found, err := replay(t, rego.Default(), serverData, cut)
	require.NoError(t, err)
	assert.Equal(t, 1, s.NotReplayable)
	require.Len(t, found, 1)
	assert.Contains(t, found[0].NotReplayable, "which is not a list event earlier in this file")
}

func TestReplayOfMalformedFilesNamesTheLine(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	log, err := os.ReadFile(path)
	require.NoError(t, err)
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		want    string
	}{
		"garbage":   {string(log) + "not json\n", ":7: malformed: not a decision event"},
		"truncated": {string(log) + `{"decision_id":"x","path":"mcp/w`, ":7: truncated"},
		"cut":       {string(log[:len(log)-2]), ":6: truncated"},
		"blank":     {"\n" + string(log), ":1: malformed"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".log")
			require.NoError(t, os.WriteFile(file, []byte(c.content), 0o600))
			_, _, err := replay(t, rego.Default(), serverData, file)
			var problem *policy.LogProblem
			require.True(t, errors.As(err, &problem), "%v", err)
			assert.Contains(t, err.Error(), file+c.want)
		})
	}

	// Records that are JSON but not decision events are counted, not fatal.
	odd := filepath.Join(dir, "odd.log")
	require.NoError(t, os.WriteFile(odd, []byte(`{"path":"mcp/warden/decision","input":[1]}
{"path":"other/rule","input":{}}
{"path":"mcp/warden/decision","input":null,"erased":["/input","/result"]}
{"path":"mcp/warden/decision","input":{"action":"tools/list","tools":[{"server":{"name":"s"},"tool":{"name":"t"}}]},"result":[]}
{"path":"mcp/warden/decision","input":{"action":"tools/call"},"erased":["/nowhere"]}
`), 0o600))
	s, found, err := replay(t, rego.Default(), serverData, odd)
	require.NoError(t, err)
	assert.Equal(t, 5, s.NotReplayable)
	var reasons []string
	for _, f := range found {
		reasons = append(reasons, f.NotReplayable)
	}
	assert.Equal(t, []string{
		"the input is not an input document: json: cannot unmarshal array into Go value of type policy.eventHead",
		`not a decision of mcp/warden/decision (path "other/rule")`,
		"the input was erased by the log mask",
		"the input lists 1 items and the result 0",
		`the event's erased path "/nowhere": data.system.log.mask: path "/nowhere" is not under /input, /result or /nd_builtin_cache`,
	}, reasons)

	_, _, err = replay(t, rego.Default(), serverData, filepath.Join(dir, "missing.log"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.log")
}

func TestReplayNeedsTheRegoEngine(t *testing.T) {
	engine := newWasmEngine(t, rego.Default(), serverData, policy.WasmOptions{Instances: 1})
	_, err := policy.ReplayDecisionLog(context.Background(), engine, nil, nil)
	require.ErrorContains(t, err, "replay evaluates with the rego engine")
}

func TestReplayOfARepeatUsesItsOwnRequest(t *testing.T) {
	path := decisionLogFile(t, rego.Default(), serverData, defaultTraffic)
	// A policy that reads the request id cannot reuse the list's replay
	// for its repeat: the repeat (request "2") is decided on its own.
	p := policyDir(t, map[string]string{"p.rego": `package mcp.warden

decision := {"allow": input.request_id != "2"}
`})
	_, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	var repeat []string
	for _, f := range found {
		if f.Line == 5 {
			repeat = append(repeat, f.Item+" "+f.Replayed)
		}
	}
	assert.Equal(t, []string{
		`tool files__list (item 1 of 4) {"allow":false}`,
		`tool files__read_file (item 2 of 4) {"allow":false}`,
		`tool files__read_secret (item 3 of 4) {"allow":false}`,
		`tool files__write_file (item 4 of 4) {"allow":false}`,
	}, repeat)
}

func TestReplayOfAListItemTheMaskChanged(t *testing.T) {
	p := policyDir(t, map[string]string{
		"p.rego": `package mcp.warden

decision := {"allow": input.tool.description != "secret"}
`,
		"log.rego": `package system.log

mask contains "/input/tools/1/tool/description" if input.input.action == "tools/list"
`})
	path := decisionLogFile(t, p, nil, func(d *policy.Decider) {
		inputs := listInputs([]string{"a", "b", "c"}, time.Now(), "1")
		inputs[1].Tool.Description = "secret"
		d.DecideExposure(context.Background(), inputs)
	})
	s, found, err := replay(t, p, nil, path)
	require.NoError(t, err)
	assert.Equal(t, 2, s.Same)
	require.Len(t, found, 1)
	assert.Equal(t, "tool files__b (item 2 of 3)", found[0].Item)
	assert.Equal(t, "input/tools/1/tool/description erased by the log mask and read by the policy", found[0].NotReplayable)
}

func TestReplayFindingCannotForgeReportLines(t *testing.T) {
	f := policy.ReplayFinding{File: "d.log", Line: 3, DecisionID: "id", Action: policy.ActionToolsCall,
		Item: "tool x\nd.log:9: forged", Principal: "p\n", NotReplayable: "why"}
	assert.Equal(t, `d.log:3: decision id tools/call "tool x\nd.log:9: forged" principal "p\n": not replayable: why`, f.String())
	long := policy.ReplayFinding{Logged: strings.Repeat("é", 400), Replayed: "{}"}
	assert.Contains(t, long.String(), "…(800 bytes)")
	assert.Less(t, len(long.String()), 400)
}
