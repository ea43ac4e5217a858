package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// randomInputValue is an Input from a small vocabulary, every field set or
// not at random, so that the members a policy reads are sometimes absent.
func randomInputValue(r *rand.Rand) policy.Input {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	in := policy.Input{
		Action:    policy.Action(pick("tools/call", "tools/list", "resources/read", "resources/list", "prompts/get", "prompts/list", "", "sampling/x")),
		Principal: policy.Principal{ID: pick("alice", "bob", ""), AuthMethod: pick("jwt", "none"), Transport: pick("stdio", "api")},
		Server: policy.Server{
			Name:    pick("files", "exact", "open", "walled", "closed", "blockless", "misblocked", "objblocked", "stringy", "badglob", "demo", "unknown", ""),
			Command: pick("/bin/true", ""), Args: []string{"-v"},
			Confinement: policy.Confinement{ProcessGroup: r.IntN(2) == 0, Level: pick("strong", "weak", ""), Landlock: r.IntN(4), Missing: []string{"seccomp: no"}},
		},
		RequestID: fmt.Sprint(r.IntN(1000)),
		SessionID: pick("", "s1"),
		Time:      "2026-01-01T00:00:00Z",
	}
	if r.IntN(3) == 0 {
		in.Principal.Claims = map[string]any{"groups": []any{pick("admin", "dev")}, "scope": pick("", "tools")}
	}
	names := []string{"read_file", "read_secrets", "list_dir", "write_file", "echo", "add", "read_note", "delete_note", "get_x", "put_y.z", "a.b", "", "*"}
	if r.IntN(6) != 0 {
		name := names[r.IntN(len(names))]
		in.Tool = &policy.Tool{Name: "x__" + name, UpstreamName: name, Description: pick("", "Reads <a> file & more."),
			InputSchema: map[string]any{"type": "object"}, SHA256: strings.Repeat("0", 64)}
	}
	if r.IntN(3) == 0 {
		in.Resource = &policy.Resource{URI: pick("file:///srv/a", "file:///etc/passwd", "", "note://x"), Template: r.IntN(2) == 0, Name: pick("", "a")}
	}
	if r.IntN(3) == 0 {
		name := names[r.IntN(len(names))]
		in.Prompt = &policy.Prompt{Name: name, UpstreamName: name, Description: pick("", "d")}
	}
	if r.IntN(2) == 0 {
		in.Arguments = map[string]any{"name": pick("today.md", "private/x", "/private", "..", "a/../b", "private", ""), "n": r.IntN(10)}
		if r.IntN(4) == 0 {
			in.Arguments["path"] = nil
		}
	}
	return in
}

// A decision on the input reduced to what the policy reads is the decision
// on the whole input, for both engines, over 10,000 random inputs.
func TestPrunedInputDecidesAsWholeInput(t *testing.T) {
	const inputs = 10_000
	ctx := context.Background()
	for name, p := range map[string]*rego.Policy{"Default": rego.Default(), "Demo": rego.Demo()} {
		regoEngine, err := policy.NewRegoEngine(ctx, p, differentialData)
		require.NoError(t, err)
		for engineName, e := range map[string]policy.Engine{
			"rego": regoEngine,
			"wasm": newWasmEngine(t, p, differentialData, policy.WasmOptions{}),
		} {
			t.Run(name+"/"+engineName, func(t *testing.T) {
				r := rand.New(rand.NewPCG(2, uint64(len(name))))
				seen := map[string]int{}
				shorter := 0
				for i := range inputs {
					in := randomInputValue(r)
					whole, err := json.Marshal(in)
					require.NoError(t, err)
					pruned, err := policy.EncodeInputFor(e, in)
					require.NoError(t, err)
					if len(pruned) < len(whole) {
						shorter++
					}
					want, wantErr := e.Evaluate(ctx, whole)
					got, gotErr := e.Evaluate(ctx, pruned)
					if (wantErr == nil) != (gotErr == nil) {
						t.Fatalf("input %d %s: error %v on the whole input, %v on %s", i, whole, wantErr, gotErr, pruned)
					}
					require.Equal(t, want, got, "input %d: %s, pruned %s", i, whole, pruned)
					if m, ok := got.(map[string]any); ok {
						seen[fmt.Sprint(m["allow"], " ", m["hidden"] == true, " ", strings.SplitN(fmt.Sprint(m["reason"]), " ", 2)[0])]++
					}
				}
				t.Logf("outcomes: %v", seen)
				require.GreaterOrEqual(t, len(seen), 4)
				require.Equal(t, inputs, shorter, "every input was pruned")
			})
		}
	}
}

// The default library reads the action, the server's name and the item's
// name: that is all its engines are given.
func TestPrunedInputOfDefaultLibrary(t *testing.T) {
	ctx := context.Background()
	regoEngine, err := policy.NewRegoEngine(ctx, rego.Default(), benchData)
	require.NoError(t, err)
	in := input(policy.ActionToolsCall, "read_file", map[string]any{"path": "notes"})
	in.Tool.Description, in.Tool.InputSchema = "Reads a file.", map[string]any{"type": "object"}
	in.Resource = &policy.Resource{URI: "file:///a", Name: "a"}
	for name, e := range map[string]policy.Engine{"rego": regoEngine, "wasm": newWasmEngine(t, rego.Default(), benchData, policy.WasmOptions{})} {
		doc, err := policy.EncodeInputFor(e, in)
		require.NoError(t, err)
		assert.JSONEq(t, `{"action":"tools/call","server":{"name":"files"},"tool":{"upstream_name":"read_file"},"resource":{"uri":"file:///a"}}`, string(doc), name)
	}
}

// A policy that reads the input as a whole, or by a key computed at
// evaluation, is given all of it; one that reads a member whole is given
// that member whole.
func TestPolicyReadingInputDynamicallyGetsWholeInput(t *testing.T) {
	ctx := context.Background()
	in := input(policy.ActionToolsCall, "read_file", map[string]any{"path": "notes", "n": 3})
	in.Tool.Description, in.Principal.Claims = "Reads a file.", map[string]any{"groups": []any{"dev"}}
	in.Server.Confinement.Missing = []string{"landlock: none"}
	whole, err := json.Marshal(in)
	require.NoError(t, err)
	var wholeDoc map[string]any
	require.NoError(t, json.Unmarshal(whole, &wholeDoc))
	keys := make([]string, 0, len(wholeDoc))
	for k := range wholeDoc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tool, err := json.Marshal(in.Tool)
	require.NoError(t, err)
	for _, c := range []struct {
		name, rule string
		want       string // the reason: what the policy saw
	}{
		{"whole input", `json.marshal(input)`, string(whole)},
		{"computed key", `concat(",", sort([k | input[k]]))`, strings.Join(keys, ",")},
		{"member whole", `json.marshal(input.tool)`, string(tool)},
	} {
		p := policyDir(t, map[string]string{"p.rego": "package mcp.warden\n\ndecision := {\"allow\": true, \"reason\": " + c.rule + "}\n"})
		regoEngine, err := policy.NewRegoEngine(ctx, p, nil)
		require.NoError(t, err)
		for name, e := range map[string]policy.Engine{"rego": regoEngine, "wasm": newWasmEngine(t, p, nil, policy.WasmOptions{})} {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				d := policy.NewDecider(e, policy.NewDecisionLog(&syncWriter{w: &bytes.Buffer{}}, policy.DecisionLogOptions{}))
				dec := d.Decide(ctx, in)
				require.True(t, dec.Allow, dec.Reason)
				if strings.HasPrefix(c.want, "{") {
					assert.JSONEq(t, c.want, dec.Reason)
				} else {
					assert.Equal(t, c.want, dec.Reason)
				}
			})
		}
	}
}
