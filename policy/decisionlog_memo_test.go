package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// memoCheck encodes events through one encoder, whose memo remembers the
// tools and servers, and checks each record against json.Marshal followed
// by canonicalization.
type memoCheck struct {
	t                  *testing.T
	enc                *eventEncoder
	direct, marshalled bytes.Buffer
	dw, mw             *auditlog.Writer
	last               string
}

func newMemoCheck(t *testing.T) *memoCheck {
	c := &memoCheck{t: t, enc: newEventEncoder(nil, nil)}
	c.dw, c.mw = auditlog.NewWriter(&c.direct), auditlog.NewWriter(&c.marshalled)
	return c
}

// record logs in and returns its record, failing unless it is what
// encoding/json says.
func (c *memoCheck) record(in *Input, why string) string {
	c.t.Helper()
	ev := &Event{DecisionID: "d", Path: EntrypointPath, Timestamp: "t", Input: in, Result: decisionResult{Allow: true}}
	b, err := json.Marshal(ev)
	require.NoError(c.t, err)
	_, err = c.mw.Append(b)
	require.NoError(c.t, err)
	rec, err := c.enc.encode(nil, ev)
	require.NoError(c.t, err)
	_, err = c.dw.AppendEncoded(rec)
	require.NoError(c.t, err)
	require.Equal(c.t, c.marshalled.String(), c.direct.String(), "%s: the record shows the definition as it is now", why)
	lines := strings.Split(strings.TrimSpace(c.direct.String()), "\n")
	line := lines[len(lines)-1]
	var v struct {
		Input json.RawMessage `json:"input"`
	}
	require.NoError(c.t, json.Unmarshal([]byte(line), &v))
	return string(v.Input)
}

// memoTool is a tool as the gateway builds it: schema and annotations
// decoded from JSON with numbers kept as json.Number.
func memoTool() *Tool {
	return &Tool{Name: "files__read_file", UpstreamName: "read_file", SHA256: strings.Repeat("0", 64),
		Description: "Reads a file.",
		InputSchema: map[string]any{"type": "object", "required": []any{"path"}, "minimum": 0.0, "n": json.Number("1"),
			"properties": map[string]any{"path": map[string]any{"type": "string"}}},
		Annotations: map[string]any{"readOnlyHint": true}}
}

func memoServer() Server {
	return Server{Name: "files", Command: "files-server", Args: []string{"--root", "/srv"},
		Confinement: Confinement{Level: "partial", Landlock: 3, Seccomp: true, Missing: []string{"cgroup: none"}}}
}

// TestLogShowsDefinitionsChangedInPlace: the log reuses the encoding of a
// tool and a server it has written only while they are equal to what it
// encoded; a schema, annotation, argument or confinement changed in place
// (same maps, same slices, same *Tool) shows in the very next record.
func TestLogShowsDefinitionsChangedInPlace(t *testing.T) {
	c := newMemoCheck(t)
	tool, server := memoTool(), memoServer()
	in := &Input{Action: ActionToolsCall, Server: server, Tool: tool, Time: "t"}
	first := c.record(in, "first")
	assert.Equal(t, first, c.record(in, "unchanged"))
	tm, ok := c.enc.memo.tools.Load(tool.Name)
	require.True(t, ok, "the tool's encoding is remembered")
	require.True(t, tm.(*toolMemo).matches(tool))
	sm, ok := c.enc.memo.servers.Load(server.Name)
	require.True(t, ok, "the server's encoding is remembered")
	require.True(t, sameServer(&sm.(*serverMemo).server, &in.Server))

	schema := tool.InputSchema.(map[string]any)
	path := schema["properties"].(map[string]any)["path"].(map[string]any)
	for _, change := range []struct {
		name, shows string
		do          func()
	}{
		{"top-level schema value", `"type":"array"`, func() { schema["type"] = "array" }},
		{"nested schema value", `"path":{"type":"integer"}`, func() { path["type"] = "integer" }},
		{"key added to a nested map", `"format":"uri"`, func() { path["format"] = "uri" }},
		{"key removed", `"input_schema":{"minimum"`, func() { delete(schema, "n") }},
		{"array element replaced", `"required":["name"]`, func() { schema["required"].([]any)[0] = "name" }},
		{"0 to -0", `"minimum":-0`, func() { schema["minimum"] = math.Copysign(0, -1) }},
		{"number kept verbatim", `"n":1.0`, func() { schema["n"] = json.Number("1.0") }},
		{"annotation flipped", `"readOnlyHint":false`, func() { tool.Annotations.(map[string]any)["readOnlyHint"] = false }},
		{"description", `"description":"Reads any file."`, func() { tool.Description = "Reads any file." }},
		{"sha256", `"sha256":"1`, func() { tool.SHA256 = "1" + tool.SHA256[1:] }},
		{"schema of another type", `"input_schema":{"a":1}`, func() { tool.InputSchema = json.RawMessage(`{"a": 1}`) }},
		{"server argument replaced in place", `"args":["--root","/etc"]`, func() { in.Server.Args[1] = "/etc" }},
		{"missing protection replaced in place", `"missing":["seccomp: off"]`, func() { in.Server.Confinement.Missing[0] = "seccomp: off" }},
		{"confinement flag", `"seccomp":false`, func() { in.Server.Confinement.Seccomp = false }},
		{"landlock version", `"landlock":4`, func() { in.Server.Confinement.Landlock = 4 }},
	} {
		change.do()
		got := c.record(in, change.name)
		assert.Contains(t, got, change.shows, change.name)
	}
}

// TestLogMemoNoticesEveryField changes each exported field of a
// remembered tool and server (found by reflection, so a field added later
// is covered) and checks that the next record shows it.
func TestLogMemoNoticesEveryField(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var baseTool Tool
	var baseServer Server
	populate(r, reflect.ValueOf(&baseTool).Elem(), 0)
	populate(r, reflect.ValueOf(&baseServer).Elem(), 0)
	baseTool.Name, baseServer.Name = "tool", "server"
	fresh := func() *Input {
		tool, server := baseTool, baseServer
		tool.InputSchema = map[string]any{"type": "object", "properties": map[string]any{"a": 1.5}}
		tool.Annotations = map[string]any{"title": "t"}
		server.Args = append([]string(nil), "a", "b")
		server.Confinement.Missing = append([]string(nil), "c", "d")
		return &Input{Action: ActionToolsList, Server: server, Tool: &tool, Time: "t"}
	}
	type field struct {
		name string
		get  func(in *Input) reflect.Value
	}
	var fields []field
	var walk func(prefix string, typ reflect.Type, get func(in *Input) reflect.Value)
	walk = func(prefix string, typ reflect.Type, get func(in *Input) reflect.Value) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			g := func(in *Input) reflect.Value { return get(in).Field(i) }
			if f.Type.Kind() == reflect.Struct {
				walk(prefix+f.Name+".", f.Type, g)
				continue
			}
			fields = append(fields, field{prefix + f.Name, g})
		}
	}
	walk("Tool.", reflect.TypeFor[Tool](), func(in *Input) reflect.Value { return reflect.ValueOf(in.Tool).Elem() })
	walk("Server.", reflect.TypeFor[Server](), func(in *Input) reflect.Value { return reflect.ValueOf(&in.Server).Elem() })
	require.Greater(t, len(fields), 20)

	c := newMemoCheck(t)
	for _, f := range fields {
		in := fresh()
		before := c.record(in, f.name+" (before)")
		require.Equal(t, before, c.record(in, f.name+" (remembered)"))
		v := f.get(in)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "·")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int:
			v.SetInt(v.Int() + 1)
		case reflect.Slice: // in place: the same backing array
			v.Index(0).SetString(v.Index(0).String() + "·")
		case reflect.Interface: // in place: the same map
			v.Elem().SetMapIndex(reflect.ValueOf("added"), reflect.ValueOf(any(true)))
		default:
			t.Fatalf("%s: no change written for kind %s", f.name, v.Kind())
		}
		assert.NotEqual(t, before, c.record(in, f.name), "%s changed in place shows in the next record", f.name)
	}
}
