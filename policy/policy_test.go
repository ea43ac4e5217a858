package policy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverData is the data the gateway would give for one server "files".
var serverData = map[string]any{"warden": map[string]any{"servers": map[string]any{
	"files": map[string]any{"allow": []any{"read_*", "list"}, "block": []any{"read_secret"}},
}}}

func input(action policy.Action, tool string, args map[string]any) policy.Input {
	return policy.Input{
		Action:    action,
		Principal: policy.Principal{ID: "alice", Transport: "api", AuthMethod: "none"},
		Server:    policy.Server{Name: "files", Command: "files-server"},
		Tool:      &policy.Tool{Name: "files__" + tool, UpstreamName: tool, SHA256: strings.Repeat("0", 64)},
		Arguments: args,
		Time:      policy.Timestamp(time.Now()),
	}
}

// newDecider returns a Decider over p whose log lines are collected in buf.
func newDecider(t *testing.T, p *rego.Policy, data map[string]any, opts policy.DecisionLogOptions) (*policy.Decider, *bytes.Buffer) {
	t.Helper()
	engine, err := policy.NewRegoEngine(context.Background(), p, data)
	require.NoError(t, err)
	var buf bytes.Buffer
	opts.Revision = engine.Revision()
	opts.Rules, err = policy.NewLogRules(context.Background(), p, data)
	require.NoError(t, err)
	return policy.NewDecider(engine, policy.NewDecisionLog(&syncWriter{w: &buf}, opts)), &buf
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func events(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), "each log line is one JSON object: %s", sc.Text())
		out = append(out, ev)
	}
	return out
}

// policyDir writes modules into a fresh directory and loads it.
func policyDir(t *testing.T, modules map[string]string) *rego.Policy {
	t.Helper()
	dir := t.TempDir()
	for name, src := range modules {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600))
	}
	p, err := rego.Load(dir)
	require.NoError(t, err)
	return p
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDecideDefaultPolicyAndEventSchema(t *testing.T) {
	d, buf := newDecider(t, rego.Default(), serverData, policy.DecisionLogOptions{Labels: map[string]string{"id": "gw-1", "version": "test"}})
	ctx := context.Background()

	allowed := d.Decide(ctx, input(policy.ActionToolsCall, "read_file", map[string]any{"path": "a.txt"}))
	assert.True(t, allowed.Allow, "read_file matches read_* and is not blocked: %+v", allowed)

	blocked := d.Decide(ctx, input(policy.ActionToolsCall, "read_secret", nil))
	assert.False(t, blocked.Allow)
	assert.True(t, blocked.Hidden, "a blocked tool is hidden, so its call is answered as unknown")

	evs := events(t, buf)
	require.Len(t, evs, 2, "one event per decision")
	ev := evs[0]
	assert.Regexp(t, uuidV4, ev["decision_id"])
	assert.Equal(t, policy.EntrypointPath, ev["path"])
	assert.Equal(t, map[string]any{"id": "gw-1", "version": "test"}, ev["labels"])
	assert.Equal(t, map[string]any{"mcp-warden": map[string]any{"revision": d.Revision()}}, ev["bundles"])
	_, err := time.Parse(time.RFC3339Nano, ev["timestamp"].(string))
	assert.NoError(t, err)
	assert.Contains(t, ev["metrics"], "timer_mcp_warden_decision_ns")
	assert.Contains(t, ev["metrics"], "timer_rego_query_eval_ns", "evaluation time, under OPA's metric name")
	assert.Equal(t, float64(1), ev["req_id"])
	assert.Regexp(t, "^[0-9a-f]{64}$", ev["hash"], "every record is hash-chained")
	assert.Equal(t, strings.Repeat("0", 64), ev["prev_hash"], "the first record starts the chain")
	assert.Equal(t, ev["hash"], evs[1]["prev_hash"])
	assert.Equal(t, true, ev["result"].(map[string]any)["allow"])
	in := ev["input"].(map[string]any)
	assert.Equal(t, "tools/call", in["action"])
	assert.NotContains(t, in, "arguments", "arguments are not logged unless the policy's mask says otherwise")
	assert.Equal(t, []any{"/input/arguments"}, ev["erased"])
	assert.Equal(t, map[string]any{"id": "alice", "transport": "api", "auth_method": "none"}, in["principal"])
	assert.NotEqual(t, evs[0]["decision_id"], evs[1]["decision_id"])
	assert.Equal(t, true, evs[1]["result"].(map[string]any)["hidden"])
}

func TestDecideExposureWritesOneEventWithEveryTool(t *testing.T) {
	d, buf := newDecider(t, rego.Default(), serverData, policy.DecisionLogOptions{})
	tools := []string{"read_file", "read_secret", "list", "delete"}
	inputs := make([]policy.Input, len(tools))
	for i, name := range tools {
		inputs[i] = input(policy.ActionToolsList, name, nil)
	}
	decisions := d.DecideExposure(context.Background(), inputs)
	require.Len(t, decisions, 4)
	got := map[string]bool{}
	for i, dec := range decisions {
		got[tools[i]] = dec.Allow
		assert.NotEmpty(t, dec.Reason, "every exposure decision has a reason")
	}
	assert.Equal(t, map[string]bool{"read_file": true, "read_secret": false, "list": true, "delete": false}, got)

	evs := events(t, buf)
	require.Len(t, evs, 1, "a tools/list is one event")
	in := evs[0]["input"].(map[string]any)
	assert.Equal(t, "tools/list", in["action"])
	require.Len(t, in["tools"], 4)
	results := evs[0]["result"].([]any)
	require.Len(t, results, 4)
	for i, r := range results {
		r := r.(map[string]any)
		assert.Equal(t, "files__"+tools[i], r["tool"])
		assert.Equal(t, got[tools[i]], r["allow"])
		assert.NotEmpty(t, r["reason"])
	}
}

func TestPolicyErrorsDenyAndAreLogged(t *testing.T) {
	cases := map[string]struct {
		module     string
		wantReason string
	}{
		"evaluation error": {
			module: `package mcp.warden
decision := {"allow": true} if input.principal.id == "alice"
decision := {"allow": false} if input.principal.transport == "api"`,
			wantReason: "conflict",
		},
		"undefined": {
			module:     "package mcp.warden\ndecision := {\"allow\": true} if input.principal.id == \"nobody\"",
			wantReason: "undefined",
		},
		"not an object": {
			module:     "package mcp.warden\ndecision := \"yes\"",
			wantReason: "want an object",
		},
		"allow not boolean": {
			module:     "package mcp.warden\ndecision := {\"allow\": \"true\"}",
			wantReason: "want a boolean",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, buf := newDecider(t, policyDir(t, map[string]string{"p.rego": tc.module}), nil, policy.DecisionLogOptions{})
			dec := d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
			assert.False(t, dec.Allow, "fail closed")
			assert.True(t, dec.Hidden, "an erroring call reveals nothing about the tool")
			assert.Contains(t, dec.Reason, tc.wantReason)
			evs := events(t, buf)
			require.Len(t, evs, 1)
			require.NotNil(t, evs[0]["error"], "the log says why")
			assert.Contains(t, evs[0]["error"].(map[string]any)["message"], tc.wantReason)
			assert.Equal(t, false, evs[0]["result"].(map[string]any)["allow"])
		})
	}
}

func TestUnwritableLogDenies(t *testing.T) {
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	f, err := os.Create(filepath.Join(t.TempDir(), "decisions.log"))
	require.NoError(t, err)
	require.NoError(t, f.Close()) // every write now fails, as on a lost disk
	d := policy.NewDecider(engine, policy.NewDecisionLog(f, policy.DecisionLogOptions{}))

	dec := d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
	assert.False(t, dec.Allow, "a decision that cannot be logged is a denial")
	assert.Contains(t, dec.Reason, "decision log")

	exposure := d.DecideExposure(context.Background(), []policy.Input{input(policy.ActionToolsList, "read_file", nil)})
	assert.False(t, exposure[0].Allow)
}

// allowAll allows everything and keeps arguments in the log: its mask
// rule is defined (so the default mask does not apply) but empty.
var allowAll = map[string]string{
	"p.rego":   "package mcp.warden\n\ndecision := {\"allow\": true}\n",
	"log.rego": "package system.log\n\nmask contains x if {\n\tsome x in []\n}\n",
}

func TestSecretsNeverLogged(t *testing.T) {
	const secret = `s3cr3t-"token"\value`
	p := policyDir(t, allowAll)
	d, buf := newDecider(t, p, nil, policy.DecisionLogOptions{Redact: []string{secret}})
	d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", map[string]any{
		"path": "prefix-" + secret, secret: "as a key too",
	}))
	line := buf.String()
	assert.NotContains(t, line, "s3cr3t")
	assert.Contains(t, line, "prefix-[REDACTED]")
	evs := events(t, buf)
	require.Len(t, evs, 1, "redaction keeps the line valid JSON")
}

func TestDecisionLogFileAppendsAndIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	for range 2 { // reopening appends
		l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{})
		require.NoError(t, err)
		policy.NewDecider(engine, l).Decide(context.Background(), input(policy.ActionToolsCall, "list", nil))
		require.NoError(t, l.Close())
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, events(t, bytes.NewBuffer(b)), 2)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "decision logs hold arguments: owner-only")
}

func TestConcurrentDecisionsEachLoggedOnce(t *testing.T) {
	d, buf := newDecider(t, rego.Default(), serverData, policy.DecisionLogOptions{})
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				dec := d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", map[string]any{"w": w, "i": i}))
				assert.True(t, dec.Allow)
			}
		})
	}
	wg.Wait()
	evs := events(t, buf)
	require.Len(t, evs, workers*each)
	seen := map[string]bool{}
	for _, ev := range evs {
		id := ev["decision_id"].(string)
		assert.False(t, seen[id], "decision ids are unique")
		seen[id] = true
	}
}

func TestInputMatchesSchemaFields(t *testing.T) {
	// Every field the policy input carries is described in input.schema.json
	// and the schema describes nothing the input lacks.
	b, err := os.ReadFile("input.schema.json")
	require.NoError(t, err)
	var schema struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(b, &schema))
	full := input(policy.ActionToolsCall, "x", map[string]any{"a": 1})
	full.RequestID, full.SessionID = "1", "s"
	full.Principal.Claims = map[string]any{"k": "v"}
	full.Principal.AuthMethod = "jwt"
	full.Server.Args, full.Server.URL = []string{"a"}, "https://x"
	full.Tool.Description, full.Tool.InputSchema, full.Tool.Annotations = "d", map[string]any{}, map[string]any{}
	// resource and prompt belong to other actions; one input shows them all.
	full.Resource = &policy.Resource{URI: "u", Template: true, Name: "n", MIMEType: "m"}
	full.Prompt = &policy.Prompt{Name: "p", UpstreamName: "p", Description: "d"}
	enc, err := json.Marshal(full)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(enc, &doc))
	assert.ElementsMatch(t, keys(schema.Properties), keys(doc))
	for _, obj := range []string{"principal", "server", "tool", "resource", "prompt"} {
		assert.ElementsMatch(t, keys(schema.Properties[obj].Properties), keys(doc[obj].(map[string]any)), obj)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestEventNotesReachCustom: notes put on a context land in the "custom"
// member of every event logged under it, single decisions and lists alike;
// notes added under notes merge with them; other events carry none.
func TestEventNotesReachCustom(t *testing.T) {
	d, buf := newDecider(t, rego.Default(), serverData, policy.DecisionLogOptions{})
	ctx := policy.WithEventNotes(context.Background(), map[string]any{"purpose": "test", "kept": "outer"})
	ctx = policy.WithEventNotes(ctx, map[string]any{"purpose": "inner", "lists": []any{"tools"}})
	d.Decide(ctx, input(policy.ActionToolsCall, "read_file", nil))
	d.DecideExposure(ctx, []policy.Input{input(policy.ActionToolsList, "read_file", nil), input(policy.ActionToolsList, "list", nil)})
	d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
	evs := events(t, buf)
	require.Len(t, evs, 3)
	want := map[string]any{"purpose": "inner", "kept": "outer", "lists": []any{"tools"}}
	assert.Equal(t, want, evs[0]["custom"], "a single decision carries the notes")
	assert.Equal(t, want, evs[1]["custom"], "a list decision carries the notes")
	assert.NotContains(t, evs[2], "custom", "a decision made without notes has none")
}
