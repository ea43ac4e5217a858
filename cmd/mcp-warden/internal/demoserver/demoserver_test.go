package demoserver

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// connect starts a fresh demo server and returns a client session to it over
// in-memory transports; both ends are closed when the test ends.
func connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := newServer().Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "demoserver-test", Version: "v0"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s(%v): %v", tool, args, err)
	}
	return res
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("want one content block, got %d: %+v", len(res.Content), res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("want text content, got %T", res.Content[0])
	}
	return tc.Text
}

func TestServerInfoAndTools(t *testing.T) {
	cs := connect(t)
	if got := cs.InitializeResult().ServerInfo.Name; got != Name {
		t.Errorf("server name = %q, want %q", got, Name)
	}
	required := map[string][]string{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("list tools: %v", err)
		}
		schema, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var s struct{ Required []string }
		if err := json.Unmarshal(schema, &s); err != nil {
			t.Fatal(err)
		}
		required[tool.Name] = s.Required
	}
	want := map[string][]string{"echo": {"message"}, "add": {"a", "b"}, "read_note": {"name"}, "reset_notes": nil}
	for name, req := range want {
		got, ok := required[name]
		if !ok {
			t.Errorf("tool %s not listed; listed: %v", name, required)
			continue
		}
		if !slices.Equal(got, req) {
			t.Errorf("tool %s requires %v, want %v", name, got, req)
		}
	}
	if len(required) != len(want) {
		t.Errorf("listed %d tools (%v), want %d", len(required), required, len(want))
	}
}

func TestEcho(t *testing.T) {
	cs := connect(t)
	res := call(t, cs, "echo", map[string]any{"message": "héllo, wärden\nline two"})
	if res.IsError || text(t, res) != "héllo, wärden\nline two" {
		t.Errorf("echo = %+v (isError %v)", res.Content, res.IsError)
	}
}

func TestAdd(t *testing.T) {
	cs := connect(t)
	for _, tc := range []struct {
		a, b float64
		text string
	}{
		{2, 3, "5"},
		{1.5, -4, "-2.5"},
		{0.1, 0.2, "0.30000000000000004"},
	} {
		res := call(t, cs, "add", map[string]any{"a": tc.a, "b": tc.b})
		if res.IsError || text(t, res) != tc.text {
			t.Errorf("add(%v, %v) content = %+v (isError %v), want %q", tc.a, tc.b, res.Content, res.IsError, tc.text)
		}
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		var out AddOutput
		if err := json.Unmarshal(raw, &out); err != nil || out.Sum != tc.a+tc.b {
			t.Errorf("add(%v, %v) structured = %s (%v), want sum %v", tc.a, tc.b, raw, err, tc.a+tc.b)
		}
	}
}

func TestAddRejectsNonNumbers(t *testing.T) {
	cs := connect(t)
	res := call(t, cs, "add", map[string]any{"a": "two", "b": 3})
	if !res.IsError {
		t.Errorf("add(\"two\", 3) = %+v, want a tool error", res.Content)
	}
}

func TestReadNote(t *testing.T) {
	cs := connect(t)
	for name, want := range seedNotes() {
		res := call(t, cs, "read_note", map[string]any{"name": name})
		if res.IsError || text(t, res) != want {
			t.Errorf("read_note(%q) = %+v (isError %v), want %q", name, res.Content, res.IsError, want)
		}
	}
	res := call(t, cs, "read_note", map[string]any{"name": "../etc/passwd"})
	if !res.IsError || !strings.Contains(text(t, res), `no note named "../etc/passwd"`) {
		t.Errorf("read_note of a missing note = %+v (isError %v), want a tool error naming it", res.Content, res.IsError)
	}
	if strings.Contains(text(t, res), "private/") {
		t.Errorf("the error for a missing note names other notes: %q", text(t, res))
	}
}

func TestResetNotes(t *testing.T) {
	cs := connect(t)
	res := call(t, cs, "reset_notes", nil)
	if res.IsError || text(t, res) != "deleted 3 notes" {
		t.Errorf("reset_notes = %+v (isError %v)", res.Content, res.IsError)
	}
	if res := call(t, cs, "read_note", map[string]any{"name": "welcome"}); !res.IsError {
		t.Errorf("read_note after reset = %+v, want a tool error", res.Content)
	}
	// Notes belong to one server: a new one starts seeded again.
	if res := call(t, connect(t), "read_note", map[string]any{"name": "welcome"}); res.IsError {
		t.Errorf("read_note on a new server = %+v, want the seeded note", res.Content)
	}
}

// runOverPipes starts Run on one end of two pipes and connects a client to
// the other, as `mcp-warden demo-server` is used over stdin and stdout.
func runOverPipes(t *testing.T, ctx context.Context) (*mcp.ClientSession, <-chan error) {
	t.Helper()
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := Run(ctx, toServer, fromServer)
		fromServer.Close() // as the process's exit would close stdout
		done <- err
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "demoserver-test", Version: "v0"}, nil).
		Connect(t.Context(), &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	if res := call(t, cs, "echo", map[string]any{"message": "over pipes"}); text(t, res) != "over pipes" {
		t.Fatalf("echo over pipes = %+v", res.Content)
	}
	return cs, done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestRunEndsAtEOF(t *testing.T) {
	cs, done := runOverPipes(t, t.Context())
	cs.Close() // closes the server's input
	if err := wait(t, done); err != nil {
		t.Errorf("Run after EOF = %v, want nil", err)
	}
}

func TestRunEndsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cs, done := runOverPipes(t, ctx)
	cancel()
	if err := wait(t, done); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	cs.Close()
}
