package rego

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatewayData is data.warden.servers as the gateway passes it from its
// config: allow and block lists per server.
var gatewayData = map[string]any{"warden": map[string]any{"servers": map[string]any{
	"files": map[string][]string{"allow": {"read_*", "list_*"}, "block": {"read_secret*"}},
	"open":  map[string][]string{"allow": {"*"}},
	"empty": map[string][]string{"allow": {}},
	"demo":  map[string][]string{"allow": {"*"}, "block": {"reset_notes"}},
}}}

// The exact decision objects of the default policy.
var (
	allowed     = map[string]any{"allow": true, "reason": "tool exposed by data.warden.servers and not denied"}
	hidden      = map[string]any{"allow": false, "hidden": true, "reason": "unknown tool"}
	defaultDeny = map[string]any{"allow": false, "reason": "denied by default: only tools, resources and prompts exposed by data.warden.servers are allowed"}
	notesDenied = map[string]any{"allow": false, "reason": "notes under private/ and paths with .. are not readable through the gateway"}
)

func notListed(tool, server string) map[string]any {
	return map[string]any{"allow": false, "reason": fmt.Sprintf("tool %q of server %q is not exposed by data.warden.servers", tool, server)}
}

// input returns the JSON input document of a decision, as policy.Input
// encodes it.
func input(action, server, tool string, arguments map[string]any) []byte {
	in := map[string]any{
		"action":    action,
		"principal": map[string]any{"id": "alice", "claims": map[string]any{"team": "blue"}, "transport": "stdio"},
		"server": map[string]any{
			"name":    server,
			"command": "/usr/bin/" + server,
			"args":    []string{"--stdio"},
			"confinement": map[string]bool{
				"process_group": true, "pid_namespace": true, "parent_death_signal": true, "environment_inherited": false,
			},
		},
		"tool": map[string]any{
			"name":          server + "__" + tool,
			"upstream_name": tool,
			"description":   "does " + tool,
			"input_schema":  map[string]any{"type": "object", "properties": map[string]any{"name": map[string]string{"type": "string"}}},
			"annotations":   map[string]bool{"readOnlyHint": true},
			"sha256":        strings.Repeat("ab", 32),
		},
		"request_id": "7",
		"session_id": "s-1",
		"time":       "2026-05-01T12:00:00.123456789Z",
	}
	if arguments != nil {
		in["arguments"] = arguments
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	return b
}

func prepare(t testing.TB, p *Policy) *Query {
	t.Helper()
	q, err := Prepare(context.Background(), p, "data.mcp.warden.decision", gatewayData)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestDefaultPolicyDecisions(t *testing.T) {
	def, demo := prepare(t, Default()), prepare(t, Demo())
	for _, tc := range []struct {
		name  string
		q     *Query
		input []byte
		want  map[string]any
	}{
		{"list: allow glob", def, input("tools/list", "files", "read_file", nil), allowed},
		{"list: allow star, dotted name", def, input("tools/list", "open", "fs.read/all", nil), allowed},
		{"list: no allow pattern matches", def, input("tools/list", "files", "write_file", nil), notListed("write_file", "files")},
		{"list: block wins", def, input("tools/list", "files", "read_secrets", nil), notListed("read_secrets", "files")},
		{"list: empty allow", def, input("tools/list", "empty", "echo", nil), notListed("echo", "empty")},
		{"list: missing server", def, input("tools/list", "ghost", "echo", nil), notListed("echo", "ghost")},
		{"call: exposed", def, input("tools/call", "files", "read_file", map[string]any{"path": "a"}), allowed},
		{"call: not exposed is hidden", def, input("tools/call", "files", "write_file", nil), hidden},
		{"call: blocked is hidden", def, input("tools/call", "files", "read_secrets", nil), hidden},
		{"call: missing server is hidden", def, input("tools/call", "ghost", "echo", nil), hidden},
		{"unknown action", def, input("sampling/createMessage", "open", "echo", nil), defaultDeny},
		{"empty input", def, []byte(`{}`), defaultDeny},
		{"input not an object", def, []byte(`[1, 2]`), defaultDeny},

		{"demo: echo", demo, input("tools/call", "demo", "echo", map[string]any{"message": "hi"}), allowed},
		{"demo: reset_notes hidden", demo, input("tools/call", "demo", "reset_notes", map[string]any{}), hidden},
		{"demo: reset_notes not listed", demo, input("tools/list", "demo", "reset_notes", nil), notListed("reset_notes", "demo")},
		{"demo: public note", demo, input("tools/call", "demo", "read_note", map[string]any{"name": "ideas"}), allowed},
		{"demo: private note", demo, input("tools/call", "demo", "read_note", map[string]any{"name": "private/diary"}), notesDenied},
		{"demo: dotdot", demo, input("tools/call", "demo", "read_note", map[string]any{"name": "../secret"}), notesDenied},
		{"demo: read_note listed", demo, input("tools/list", "demo", "read_note", nil), allowed},
		{"default policy has no demo rule", def, input("tools/call", "demo", "read_note", map[string]any{"name": "private/diary"}), allowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, defined, err := tc.q.Eval(context.Background(), tc.input)
			if err != nil || !defined {
				t.Fatalf("Eval = %v, defined %v, error %v", got, defined, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decision = %#v\nwant       %#v", got, tc.want)
			}
		})
	}
}

func TestDenialsOfAnotherModuleAreCombined(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "library.rego", readFile(t, "library/decision.rego"))
	writeFile(t, dir, "exposure.rego", readFile(t, "library/exposure.rego"))
	writeFile(t, dir, "extra.rego", `package mcp.warden

deny contains "weakly confined" if not input.server.confinement.pid_namespace

deny contains "after hours" if input.time >= "2026-05-01T18:00:00Z"
`)
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	q := prepare(t, p)

	in := input("tools/call", "open", "echo", nil)
	got, _, err := q.Eval(context.Background(), in)
	if err != nil || !reflect.DeepEqual(got, allowed) {
		t.Errorf("no denial: %v, %v", got, err)
	}
	in = []byte(strings.Replace(string(in), `"pid_namespace":true`, `"pid_namespace":false`, 1))
	in = []byte(strings.Replace(string(in), `"time":"2026-05-01T12:`, `"time":"2026-05-01T19:`, 1))
	got, _, err = q.Eval(context.Background(), in)
	want := map[string]any{"allow": false, "reason": "after hours; weakly confined"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("two denials: %v, %v; want %v", got, err, want)
	}
}

func TestEvalUndefined(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.rego", "package p\n\nallow if input.user == \"alice\"\n")
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Prepare(context.Background(), p, "data.p.allow", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, defined, err := q.Eval(context.Background(), []byte(`{"user": "bob"}`))
	if got != nil || defined || err != nil {
		t.Errorf("Eval = %v, %v, %v; want nil, false, nil", got, defined, err)
	}
	got, defined, err = q.Eval(context.Background(), []byte(`{"user": "alice"}`))
	if got != true || !defined || err != nil {
		t.Errorf("Eval = %v, %v, %v; want true, true, nil", got, defined, err)
	}
}

func TestEvalNumbersAreJSONNumbers(t *testing.T) {
	p, err := Load("testdata/custom")
	if err != nil {
		t.Fatal(err)
	}
	q := prepare(t, p)
	got, _, err := q.Eval(context.Background(), []byte(`{"tool": {"upstream_name": "echo"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := got.(map[string]any)["weight"].(json.Number); !ok || w != "1.5" {
		t.Errorf("weight = %#v, want json.Number(\"1.5\")", got.(map[string]any)["weight"])
	}
}

func TestEvalMalformedInput(t *testing.T) {
	q := prepare(t, Default())
	for _, in := range []string{``, `{`, `{"action": "tools/call",}`, `{"a": 1} {"b": 2}`, `{} x`, `nul`} {
		got, defined, err := q.Eval(context.Background(), []byte(in))
		if err == nil || defined || got != nil {
			t.Errorf("Eval(%q) = %v, %v, %v; want an error", in, got, defined, err)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	ctx := context.Background()
	custom, err := Load("testdata/custom")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *Policy
		rule string
		data map[string]any
		want string
	}{
		{"nil policy", nil, "data.mcp.warden.decision", nil, "nil policy"},
		{"not a ref", Default(), "1 + 1", nil, "not a rule reference"},
		{"not under data", Default(), "input.action", nil, "not a rule reference"},
		{"not ground", Default(), "data.mcp.warden[x]", nil, "not a rule reference"},
		{"undefined rule", Default(), "data.mcp.warden.decison", nil, "no rule or data of the policy defines it"},
		{"data conflict", custom, "data.mcp.warden.decision", map[string]any{"warden": map[string]any{"trusted": []string{"rm"}}}, "data.warden.trusted is defined twice"},
		{"data over a rule", Default(), "data.mcp.warden.decision", map[string]any{"mcp": map[string]any{"warden": map[string]any{"exposed": true}}}, "conflict"},
		{"data not JSON", Default(), "data.mcp.warden.decision", map[string]any{"f": func() {}}, "data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Prepare(ctx, tc.p, tc.rule, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare = %v, %v; want an error containing %q", q, err, tc.want)
			}
		})
	}

	// A rule defined only by data is fine.
	if _, err := Prepare(ctx, custom, "data.warden.trusted", nil); err != nil {
		t.Errorf("rule defined by data: %v", err)
	}
}

func TestEvalConcurrent(t *testing.T) {
	q := prepare(t, Demo())
	cases := []struct {
		input []byte
		want  map[string]any
	}{
		{input("tools/call", "demo", "echo", map[string]any{"message": "hi"}), allowed},
		{input("tools/call", "demo", "reset_notes", nil), hidden},
		{input("tools/call", "demo", "read_note", map[string]any{"name": "private/x"}), notesDenied},
		{input("tools/list", "files", "write_file", nil), notListed("write_file", "files")},
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				tc := cases[(g+i)%len(cases)]
				got, _, err := q.Eval(context.Background(), tc.input)
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Errorf("goroutine %d: %v, %v; want %v", g, got, err, tc.want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestPrepareConcurrentOnSharedPolicy(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			q, err := Prepare(context.Background(), Demo(), "data.mcp.warden.decision", gatewayData)
			if err != nil {
				t.Error(err)
				return
			}
			got, _, err := q.Eval(context.Background(), input("tools/call", "demo", "echo", nil))
			if err != nil || !reflect.DeepEqual(got, allowed) {
				t.Errorf("Eval = %v, %v", got, err)
			}
		})
	}
	wg.Wait()
}

func TestEvalCanceled(t *testing.T) {
	q := prepare(t, Default())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := q.Eval(ctx, input("tools/call", "open", "echo", nil)); err == nil {
		t.Error("Eval with a canceled context succeeded")
	}
}

func fmtValue(v any) string { return fmt.Sprint(v) }

// EvalRecorded returns what the non-deterministic builtins returned, in
// the form of OPA's nd_builtin_cache, and nothing when none was called.
func TestEvalRecordedNondeterministicBuiltins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.rego", "package p\n\nv := {\"now\": time.now_ns(), \"n\": rand.intn(\"k\", 1000000)} if input.random\n\nv := 1 if not input.random\n")
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Prepare(context.Background(), p, "data.p.v", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, defined, nd, err := q.EvalRecorded(context.Background(), []byte(`{"random": true}`))
	if err != nil || !defined {
		t.Fatalf("EvalRecorded = %v, %v, %v", got, defined, err)
	}
	v := got.(map[string]any)
	var cache, want any
	if err := json.Unmarshal(nd, &cache); err != nil {
		t.Fatalf("nd_builtin_cache %s: %v", nd, err)
	}
	_ = json.Unmarshal([]byte(fmt.Sprintf(`{"time.now_ns":{"[]":%s},"rand.intn":{"[\"k\",1000000]":%s}}`, v["now"], v["n"])), &want)
	if !reflect.DeepEqual(cache, want) {
		t.Errorf("nd_builtin_cache = %s, want %v", nd, want)
	}
	if _, _, nd, err := q.EvalRecorded(context.Background(), []byte(`{"random": false}`)); err != nil || nd != nil {
		t.Errorf("no non-deterministic builtin called: nd = %s, err = %v", nd, err)
	}
}

// EvalReplayed answers the non-deterministic builtins from a recorded
// nd_builtin_cache, so the replay decides with the recorded values, and
// names the builtins whose calls the cache did not hold.
func TestEvalReplayedUsesRecordedBuiltins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.rego", "package p\n\nv := {\"now\": time.now_ns(), \"n\": rand.intn(input.key, 1000000)}\n")
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Prepare(context.Background(), p, "data.p.v", nil)
	if err != nil {
		t.Fatal(err)
	}
	recorded, _, nd, err := q.EvalRecorded(context.Background(), []byte(`{"key": "k"}`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // time.now_ns would now be later
	replayed, defined, unrecorded, err := q.EvalReplayed(context.Background(), []byte(`{"key": "k"}`), nd)
	if err != nil || !defined || len(unrecorded) != 0 {
		t.Fatalf("EvalReplayed = %v, %v, %v, %v", replayed, defined, unrecorded, err)
	}
	if !reflect.DeepEqual(replayed, recorded) {
		t.Errorf("replayed %v, recorded %v", replayed, recorded)
	}
	// Other arguments for rand.intn: its value is fresh, and said to be.
	_, _, unrecorded, err = q.EvalReplayed(context.Background(), []byte(`{"key": "other"}`), nd)
	if err != nil || !reflect.DeepEqual(unrecorded, []string{"rand.intn"}) {
		t.Errorf("unrecorded = %v, %v; want [rand.intn]", unrecorded, err)
	}
	_, _, unrecorded, err = q.EvalReplayed(context.Background(), []byte(`{"key": "k"}`), nil)
	if err != nil || !reflect.DeepEqual(unrecorded, []string{"rand.intn", "time.now_ns"}) {
		t.Errorf("without a cache, unrecorded = %v, %v", unrecorded, err)
	}
	if _, _, _, err := q.EvalReplayed(context.Background(), []byte(`{}`), []byte(`{"time.now_ns": {"not json": 1}}`)); err == nil {
		t.Error("a cache whose arguments are not a JSON array was accepted")
	}
}
