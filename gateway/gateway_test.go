package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

var alice = policy.Principal{ID: "alice"}

// decisionLog collects decision events written by a gateway under test.
type decisionLog struct{ testenv.Buffer }

func (l *decisionLog) events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.Bytes()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		out = append(out, ev)
	}
	return out
}

// startGateway starts a gateway on cfg and closes it when the test ends,
// proving that no process carrying the test's marker is left behind.
func startGateway(t *testing.T, cfg *Config, opts ...Option) (*Gateway, *decisionLog) {
	t.Helper()
	key, value := testenv.Marker(t)
	for i := range cfg.Servers {
		if cfg.Servers[i].Env == nil {
			cfg.Servers[i].Env = map[string]string{}
		}
		cfg.Servers[i].Env[key] = value
	}
	log := &decisionLog{}
	g, err := New(cfg, append(opts, WithDecisionLog(log))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, g.Close())
		testenv.RequireNoProcess(t, key, value)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, g.Start(ctx))
	return g, log
}

func demoServer(t *testing.T) ServerConfig {
	return ServerConfig{
		Name:    "demo",
		Command: testenv.BuildGo(t, "./cmd/mcp-warden"),
		Args:    []string{"demo-server"},
		Tools:   ToolFilter{Allow: []string{"*"}, Block: []string{"reset_notes"}},
	}
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.NotEmpty(t, res.Content)
	tc, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "first content is text: %T", res.Content[0])
	return tc.Text
}

func TestE2EDemoPolicyThroughGoAPI(t *testing.T) {
	for _, engine := range []string{policy.EngineRego, policy.EngineWasm} {
		t.Run(engine, func(t *testing.T) { testDemoPolicyThroughGoAPI(t, engine) })
	}
}

// testDemoPolicyThroughGoAPI checks the demo policy's decisions with
// engine: both engines decide the same.
func testDemoPolicyThroughGoAPI(t *testing.T, engine string) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the wasm compilation cache
	cfg := &Config{Servers: []ServerConfig{demoServer(t)}, Policy: PolicyConfig{Engine: engine}}
	g, log := startGateway(t, cfg, WithPolicy(rego.Demo()))
	ctx := context.Background()

	tools, err := g.ListTools(ctx, alice)
	require.NoError(t, err)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__read_note"}, toolNames(tools),
		"reset_notes is hidden by the block list")

	res, err := g.CallTool(ctx, alice, "demo__echo", map[string]any{"message": "hi"})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Equal(t, "hi", text(t, res))

	_, hiddenErr := g.CallTool(ctx, alice, "demo__reset_notes", nil)
	_, unknownErr := g.CallTool(ctx, alice, "demo__no_such_tool", nil)
	require.Error(t, hiddenErr)
	var hidden, unknown *jsonrpc.Error
	require.ErrorAs(t, hiddenErr, &hidden)
	require.ErrorAs(t, unknownErr, &unknown)
	assert.Equal(t, unknown.Code, hidden.Code)
	assert.Equal(t, strings.ReplaceAll(unknown.Message, "demo__no_such_tool", "X"),
		strings.ReplaceAll(hidden.Message, "demo__reset_notes", "X"), "a hidden tool is indistinguishable from a missing one")

	denied, err := g.CallTool(ctx, alice, "demo__read_note", map[string]any{"name": "private/diary"})
	require.NoError(t, err)
	assert.True(t, denied.IsError)
	assert.Contains(t, text(t, denied), "private/")

	allowed, err := g.CallTool(ctx, alice, "demo__read_note", map[string]any{"name": "welcome"})
	require.NoError(t, err)
	assert.False(t, allowed.IsError, text(t, allowed))

	// One event per decision: the list, echo, reset_notes (hidden), the
	// denied and the allowed read_note. The unknown tool has no decision.
	evs := log.events(t)
	require.Len(t, evs, 5)
	assert.Equal(t, "tools/list", evs[0]["input"].(map[string]any)["action"])
	assert.Len(t, evs[0]["result"], 4, "the list event carries every tool's decision")
	denyEv := evs[3]
	assert.Equal(t, map[string]any{}, denyEv["input"].(map[string]any)["arguments"], "the demo's mask rule removes private note names")
	assert.Equal(t, []any{"/input/arguments/name"}, denyEv["erased"])
	assert.Equal(t, map[string]any{"name": "welcome"}, evs[4]["input"].(map[string]any)["arguments"], "and keeps other arguments")
	assert.Equal(t, false, denyEv["result"].(map[string]any)["allow"])
	assert.Equal(t, true, evs[2]["result"].(map[string]any)["hidden"])
}

// TestE2EPrebuiltWasmBundle serves the demo policy as a bundle built by the
// real OPA CLI (`opa build -t wasm`), with every policy.wasm key set: the
// demo's decisions, and compiled code in the configured cache directory.
func TestE2EPrebuiltWasmBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the OPA CLI")
	}
	opa := testenv.BuildGo(t, "github.com/open-policy-agent/opa")
	bundle := filepath.Join(t.TempDir(), "bundle.tar.gz")
	build := exec.Command(opa, "build", "-t", "wasm", "-e", "mcp/warden/decision", "--ignore", "*_test.rego", "-o", bundle, "rego/library", "rego/demo")
	build.Dir = testenv.RepoRoot(t)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cache := filepath.Join(t.TempDir(), "wasm-cache")
	cfg := &Config{Servers: []ServerConfig{demoServer(t)}, Policy: PolicyConfig{Path: bundle, Engine: policy.EngineWasm,
		Wasm: WasmConfig{Timeout: 250 * time.Millisecond, MemoryLimitPages: 256, CacheDir: cache, Instances: 2}}}
	require.NoError(t, cfg.Validate())
	g, log := startGateway(t, cfg)
	ctx := context.Background()

	tools, err := g.ListTools(ctx, alice)
	require.NoError(t, err)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__read_note"}, toolNames(tools))
	res, err := g.CallTool(ctx, alice, "demo__echo", map[string]any{"message": "hi"})
	require.NoError(t, err)
	assert.Equal(t, "hi", text(t, res))
	denied, err := g.CallTool(ctx, alice, "demo__read_note", map[string]any{"name": "private/diary"})
	require.NoError(t, err)
	assert.True(t, denied.IsError)
	assert.Contains(t, text(t, denied), "private/")
	require.Len(t, log.events(t), 3)

	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "nothing compiled into policy.wasm.cache_dir")
}

// TestE2EDemoPolicyOverTheWire drives the same checks through MCP clients
// on the stdio-style and streamable-HTTP faces.
func TestE2EDemoPolicyOverTheWire(t *testing.T) {
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}}, WithPolicy(rego.Demo()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	httpServer := httptest.NewServer(g.HTTPHandler(alice))
	defer httpServer.Close()

	faces := map[string]func(t *testing.T) *mcp.ClientSession{
		"in-memory stdio face": func(t *testing.T) *mcp.ClientSession {
			serverT, clientT := mcp.NewInMemoryTransports()
			served := make(chan error, 1)
			sctx, stop := context.WithCancel(ctx)
			go func() { served <- g.Serve(sctx, serverT, alice) }()
			t.Cleanup(func() { stop(); <-served })
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, clientT, nil)
			require.NoError(t, err)
			return cs
		},
		"streamable HTTP": func(t *testing.T) *mcp.ClientSession {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: httpServer.URL + "/mcp"}, nil)
			require.NoError(t, err)
			return cs
		},
	}
	for name, connect := range faces {
		t.Run(name, func(t *testing.T) {
			before := len(log.events(t))
			cs := connect(t)
			defer cs.Close()

			list, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, []string{"demo__add", "demo__echo", "demo__read_note"}, toolNames(list.Tools))

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 2, "b": 3}})
			require.NoError(t, err)
			assert.Equal(t, "5", text(t, res))

			_, hiddenErr := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__reset_notes"})
			_, unknownErr := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__missing"})
			require.Error(t, hiddenErr)
			require.Error(t, unknownErr)
			assert.Equal(t, strings.ReplaceAll(unknownErr.Error(), "demo__missing", "X"),
				strings.ReplaceAll(hiddenErr.Error(), "demo__reset_notes", "X"))

			denied, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": "../etc/passwd"}})
			require.NoError(t, err)
			assert.True(t, denied.IsError)
			assert.Contains(t, text(t, denied), "denied by policy")

			evs := log.events(t)[before:]
			require.Len(t, evs, 4, "list, add, hidden reset_notes, denied read_note")
			principal := evs[0]["input"].(map[string]any)["principal"].(map[string]any)
			assert.Equal(t, "alice", principal["id"])
		})
	}
}

func TestE2EEverythingServer(t *testing.T) {
	everything := testenv.BuildGo(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{{
		Name:    "everything",
		Command: everything,
		Tools:   ToolFilter{Allow: []string{"*"}, Block: []string{"test_sampling", "test_elicitation*"}},
	}, {
		// The same server with a call timeout shorter than its progress
		// tool: a loaded machine cannot make the other calls time out.
		Name:        "hasty",
		Command:     everything,
		Tools:       ToolFilter{Allow: []string{"test_tool_with_progress"}},
		CallTimeout: 20 * time.Millisecond,
	}}})
	ctx := context.Background()
	tools, err := g.ListTools(ctx, alice)
	require.NoError(t, err)
	names := toolNames(tools)
	assert.Contains(t, names, "everything__test_simple_text")
	assert.NotContains(t, names, "everything__test_sampling")
	assert.NotContains(t, names, "everything__test_elicitation_sep1330_enums")
	assert.Greater(t, len(names), 15)

	res, err := g.CallTool(ctx, alice, "everything__test_simple_text", nil)
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.NotEmpty(t, text(t, res))

	// The upstream's own error result passes through unchanged.
	res, err = g.CallTool(ctx, alice, "everything__test_error_handling", nil)
	require.NoError(t, err)
	assert.True(t, res.IsError)

	// The progress tool sleeps longer than the hasty server's 20ms call
	// timeout.
	res, err = g.CallTool(ctx, alice, "hasty__test_tool_with_progress", nil)
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "did not answer within 20ms")
}

func TestE2ENPMServersBehindOneGateway(t *testing.T) {
	// The servers run as unprivileged uids of their own: the directory
	// they share must be theirs to write, and declared in their profiles.
	root := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o755))
	require.NoError(t, os.Chmod(root, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from disk"), 0o644))
	memCmd, memArgs := testenv.NodeCommand(t, "mcp-server-memory")
	fsCmd, fsArgs := testenv.NodeCommand(t, "mcp-server-filesystem")
	cfg := &Config{
		Naming: NamingFirst,
		Servers: []ServerConfig{
			{Name: "memory", Command: memCmd, Args: memArgs, Tools: ToolFilter{Allow: []string{"*"}, Block: []string{"delete_*"}},
				Env:     map[string]string{"MEMORY_FILE_PATH": filepath.Join(root, "memory.jsonl")},
				Sandbox: sandbox.Profile{Mode: sandbox.ModeRequire, ReadWrite: []string{root}}},
			{Name: "files", Command: fsCmd, Args: append(fsArgs, root), Tools: ToolFilter{Allow: []string{"read_*", "list_*"}},
				Sandbox: sandbox.Profile{Mode: sandbox.ModeRequire, ReadOnly: []string{root}}},
		},
	}
	g, log := startGateway(t, cfg)
	for _, st := range g.Status() {
		require.True(t, st.Running, "server %s did not start: %v", st.Name, st.Err)
	}
	ctx := context.Background()
	tools, err := g.ListTools(ctx, alice)
	require.NoError(t, err)
	names := toolNames(tools)
	assert.Contains(t, names, "create_entities", "naming first keeps upstream names")
	assert.Contains(t, names, "read_text_file")
	assert.NotContains(t, names, "delete_entities", "blocked")
	assert.NotContains(t, names, "write_file", "not in the files allow list")

	res, err := g.CallTool(ctx, alice, "create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "warden", "entityType": "gateway", "observations": []any{"guards tools"}},
	}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(t, res))
	res, err = g.CallTool(ctx, alice, "read_graph", nil)
	require.NoError(t, err)
	assert.Contains(t, text(t, res), "guards tools")

	res, err = g.CallTool(ctx, alice, "read_text_file", map[string]any{"path": filepath.Join(root, "hello.txt")})
	require.NoError(t, err)
	assert.Equal(t, "hello from disk", text(t, res))

	_, err = g.CallTool(ctx, alice, "write_file", map[string]any{"path": filepath.Join(root, "x"), "content": "x"})
	assert.ErrorContains(t, err, "unknown tool", "a tool outside the allow list cannot be called")
	assert.Len(t, log.events(t), 5)
}

// server-filesystem is told it may serve two directories, but its sandbox
// profile grants only one: a read inside works, a read in the other is
// allowed by policy and by the server, and refused by the kernel.
func TestE2EFilesystemServerConfinedToOneDirectory(t *testing.T) {
	// The other directory must exist in the server's view (so the server
	// accepts it) and be granted by nothing: not under a directory the
	// sandbox masks (/tmp, where the checkout itself may live) nor under a
	// default read-only path. /var/lib is neither.
	inside := t.TempDir()
	outside, err := os.MkdirTemp("/var/lib", "mcp-warden-test-fs-other-")
	if err != nil {
		t.Skipf("this test needs a directory outside every sandbox default (/var/lib, as root): %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	for _, d := range []string{filepath.Dir(inside), inside, outside} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(inside, "in.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "out.txt"), []byte("not for this server"), 0o644))
	fsCmd, fsArgs := testenv.NodeCommand(t, "mcp-server-filesystem")
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{{
		Name: "files", Command: fsCmd, Args: append(fsArgs, inside, outside),
		Tools:   ToolFilter{Allow: []string{"*"}},
		Sandbox: sandbox.Profile{Mode: sandbox.ModeRequire, ReadOnly: []string{inside}},
	}}})
	ctx := context.Background()
	res, err := g.CallTool(ctx, alice, "files__read_text_file", map[string]any{"path": filepath.Join(inside, "in.txt")})
	require.NoError(t, err)
	assert.Equal(t, "inside", text(t, res))
	res, err = g.CallTool(ctx, alice, "files__read_text_file", map[string]any{"path": filepath.Join(outside, "out.txt")})
	require.NoError(t, err, "the policy allows the call")
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "EACCES", "refused by the kernel (Landlock), not by the server")
	assert.NotContains(t, text(t, res), "not for this server")
}

func TestBadServersDoNotStopHealthyOnes(t *testing.T) {
	garbage := testenv.BuildGo(t, "./testdata/servers/garbage")
	cfg := &Config{Servers: []ServerConfig{
		{Name: "missing", Command: "/nonexistent/mcp-server"},
		{Name: "crasher", Command: "/bin/sh", Args: []string{"-c", "echo dying >&2; exit 3"}},
		{Name: "garbage", Command: garbage},
		demoServer(t),
	}}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()))
	status := g.Status()
	require.Len(t, status, 4)
	for _, st := range status[:3] {
		assert.False(t, st.Running, st.Name)
		require.Error(t, st.Err, st.Name)
		assert.Contains(t, st.Err.Error(), `"`+st.Name+`"`, "the error names the server")
	}
	assert.Contains(t, status[0].Err.Error(), "/nonexistent/mcp-server")
	assert.Contains(t, status[1].Err.Error(), "exited")
	assert.True(t, status[3].Running)

	res, err := g.CallTool(context.Background(), alice, "demo__echo", map[string]any{"message": "still here"})
	require.NoError(t, err)
	assert.Equal(t, "still here", text(t, res))
}

func TestStartFailsWhenNoServerStarts(t *testing.T) {
	g, err := New(&Config{Servers: []ServerConfig{{Name: "missing", Command: "/nonexistent/x"}}}, WithDecisionLog(&decisionLog{}))
	require.NoError(t, err)
	defer g.Close()
	err = g.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no server could be started")
	assert.Contains(t, err.Error(), "/nonexistent/x")
}

func TestBrokenPolicyIsAClearError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.rego"), []byte("package mcp.warden\n\ndecision := {\n"), 0o600))
	_, err := New(&Config{Servers: []ServerConfig{{Name: "x", Command: "x"}}, Policy: PolicyConfig{Path: dir}},
		WithDecisionLog(&decisionLog{}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "broken.rego")
}

func TestNoProcessLeftBehindByStubbornServer(t *testing.T) {
	stubborn := testenv.BuildGo(t, "./testdata/servers/stubborn")
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{{Name: "stubborn", Command: stubborn, Tools: ToolFilter{Allow: []string{"*"}}}}})
	res, err := g.CallTool(context.Background(), alice, "stubborn__ping", nil)
	require.NoError(t, err)
	assert.Equal(t, "pong", text(t, res))
	// startGateway's cleanup closes the gateway and proves the server, its
	// SIGTERM-ignoring grandchild and everything else carrying the marker
	// are gone.
}

func TestSecretsNeverReachTheLog(t *testing.T) {
	t.Setenv("WARDEN_TEST_HOST_SECRET", "hunter2-very-secret")
	t.Setenv("WARDEN_TEST_NOT_DECLARED", "must-not-leak")
	sc := demoServer(t)
	sc.Secrets = map[string]string{"DEMO_TOKEN": "WARDEN_TEST_HOST_SECRET"}
	g, log := startGateway(t, &Config{Servers: []ServerConfig{sc}}, WithPolicy(rego.Demo()))
	res, err := g.CallTool(context.Background(), alice, "demo__echo", map[string]any{"message": "token is hunter2-very-secret"})
	require.NoError(t, err)
	assert.Equal(t, "token is hunter2-very-secret", text(t, res))
	assert.NotContains(t, log.String(), "hunter2")
	assert.Contains(t, log.String(), "token is [REDACTED]")
}

func TestClosedGatewayRefusesCalls(t *testing.T) {
	g, err := New(&Config{Servers: []ServerConfig{demoServer(t)}}, WithPolicy(rego.Demo()), WithDecisionLog(&decisionLog{}))
	require.NoError(t, err)
	_, err = g.ListTools(context.Background(), alice)
	assert.ErrorContains(t, err, "not started")
	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "Close is idempotent")
	_, err = g.CallTool(context.Background(), alice, "demo__echo", nil)
	assert.ErrorContains(t, err, "closed")
	assert.Error(t, g.Start(context.Background()))
	assert.False(t, errors.Is(err, context.Canceled))
}

// TestServerEnvironmentIsOnlyWhatIsDeclared asks a real server
// (@modelcontextprotocol/server-everything's get-env tool) for its
// environment: the declared variable and secret are there, nothing of the
// gateway's own environment is.
func TestE2EServerEnvironmentIsOnlyWhatIsDeclared(t *testing.T) {
	t.Setenv("WARDEN_TEST_HOST_SECRET", "hunter2-very-secret")
	t.Setenv("WARDEN_TEST_NOT_DECLARED", "must-not-leak")
	cmd, args := testenv.NodeCommand(t, "mcp-server-everything")
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{{
		Name: "everything", Command: cmd, Args: append(args, "stdio"),
		Env:     map[string]string{"DECLARED_SETTING": "on"},
		Secrets: map[string]string{"API_TOKEN": "WARDEN_TEST_HOST_SECRET"},
		Tools:   ToolFilter{Allow: []string{"get-env"}},
	}}})
	res, err := g.CallTool(context.Background(), alice, "everything__get-env", nil)
	require.NoError(t, err)
	env := text(t, res)
	assert.Contains(t, env, "DECLARED_SETTING")
	assert.Contains(t, env, "hunter2-very-secret", "the declared secret reaches the server")
	assert.NotContains(t, env, "must-not-leak")
	assert.NotContains(t, env, "WARDEN_TEST_NOT_DECLARED")
	for _, inherited := range []string{"GOPATH", "GOROOT", "GOFLAGS", "HOSTNAME"} {
		assert.NotContains(t, env, "\""+inherited+"\"", "nothing is inherited from the gateway")
	}
}
