package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	goleak.VerifyTestMain(m)
}

// writeConfig writes a gateway YAML config with one server tagged with the
// test's process marker, and returns its path and the marker.
func writeConfig(t *testing.T, server string, extra string) (path, key, value string) {
	t.Helper()
	key, value = testenv.Marker(t)
	dir := t.TempDir()
	path = filepath.Join(dir, "gateway.yaml")
	cfg := fmt.Sprintf(`servers:
%s
    env:
      %s: %q
    tools:
      allow: ["*"]
      block: [reset_notes]
decision_log:
  path: decisions.log
%s`, server, key, value, extra)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path, key, value
}

func demoServerYAML(t *testing.T) string {
	return fmt.Sprintf("  - name: demo\n    command: %s\n    args: [demo-server]", testenv.BuildGo(t, "./cmd/mcp-warden"))
}

// startServe runs `mcp-warden serve args…` and returns the process and the
// streamable-HTTP URL it reports.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(testenv.BuildGo(t, "./cmd/mcp-warden"), append([]string{"serve"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	urlRE := regexp.MustCompile(`url=(https?://\S+/mcp)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case url := <-found:
		return cmd, url
	case <-time.After(2 * time.Minute):
		t.Fatal("gateway did not report its URL")
		return nil, ""
	}
}

func TestE2EServeStdioWithRealClient(t *testing.T) {
	cfgPath, key, value := writeConfig(t, demoServerYAML(t), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(testenv.BuildGo(t, "./cmd/mcp-warden"), "serve", "--config", cfgPath, "--principal", "bob")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)

	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"demo__echo", "demo__add", "demo__read_note"}, names)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"message": "over stdio"}})
	require.NoError(t, err)
	assert.Equal(t, "over stdio", res.Content[0].(*mcp.TextContent).Text)

	// Closing the client closes the gateway's stdin: the gateway exits and
	// takes its servers with it.
	require.NoError(t, cs.Close())
	testenv.RequireNoProcess(t, key, value)

	log, err := os.ReadFile(filepath.Join(filepath.Dir(cfgPath), "decisions.log"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	require.Len(t, lines, 2, "one event for the list, one for the call")
	var ev map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &ev))
	principal := ev["input"].(map[string]any)["principal"].(map[string]any)
	assert.Equal(t, "bob", principal["id"])
	assert.Equal(t, "stdio", principal["transport"])
}

func TestE2EServeDemoOverHTTP(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	_, url := startServe(t, "--demo", "--listen", "127.0.0.1:0", "--decision-log", logPath)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.NoError(t, err)
	defer cs.Close()

	denied, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": "private/diary"}})
	require.NoError(t, err)
	assert.True(t, denied.IsError)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__reset_notes"})
	assert.ErrorContains(t, err, "unknown tool")

	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Equal(t, 2, bytes.Count(log, []byte("\n")))
	assert.Contains(t, string(log), `"principal":{"auth_method":"none","id":"demo-user","transport":"streamable-http"}`)
	out, err := exec.Command(testenv.BuildGo(t, "./cmd/mcp-warden"), "audit", "verify", logPath).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "ok: 2 records")
}

// TestE2EGatewaySIGKILLLeavesNoProcess kills the gateway process outright:
// its servers, including one that ignores SIGTERM and has a grandchild that
// does too, must not survive it.
func TestE2EGatewaySIGKILLLeavesNoProcess(t *testing.T) {
	stubborn := fmt.Sprintf("  - name: stubborn\n    command: %s", testenv.BuildGo(t, "./testdata/servers/stubborn"))
	cfgPath, key, value := writeConfig(t, stubborn, "")
	cmd, _ := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0")
	procs := testenv.WaitProcesses(t, key, value, "stubborn", "stubborn")
	require.GreaterOrEqual(t, len(procs), 2, "the server and its grandchild are running")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	testenv.RequireNoProcess(t, key, value)
}

func TestE2EServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("servers:\n  - name: x\n    comand: npx\n"), 0o600))
	out, err := exec.Command(testenv.BuildGo(t, "./cmd/mcp-warden"), "serve", "--config", bad).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "bad.yaml")
	assert.Contains(t, string(out), "comand")
	assert.NotContains(t, string(out), "panic")
}

func TestPolicyTestCommand(t *testing.T) {
	root := testenv.RepoRoot(t)
	bin := testenv.BuildGo(t, "./cmd/mcp-warden")
	out, err := exec.Command(bin, "policy", "test", "-v", filepath.Join(root, "rego/library"), filepath.Join(root, "rego/demo")).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "PASS")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fail_test.rego"), []byte("package t\n\ntest_fails if false\n"), 0o600))
	out, err = exec.Command(bin, "policy", "test", dir).CombinedOutput()
	require.Error(t, err, "a failing Rego test fails the command")
	assert.Contains(t, string(out), "1 of 1 tests failed")
}

func TestPolicyEvalCommand(t *testing.T) {
	bin := testenv.BuildGo(t, "./cmd/mcp-warden")
	cfgPath, _, _ := writeConfig(t, "  - name: demo\n    command: /bin/true", "")
	input := func(tool string, args string) string {
		path := filepath.Join(t.TempDir(), "input.json")
		doc := fmt.Sprintf(`{"action":"tools/call","principal":{"id":"alice","transport":"api"},
"server":{"name":"demo","command":"/bin/true","confinement":{"process_group":true,"pid_namespace":true,"parent_death_signal":true,"environment_inherited":false}},
"tool":{"name":"demo__%[1]s","upstream_name":"%[1]s","sha256":"%[2]s"},"arguments":%[3]s,"time":"2026-01-01T00:00:00Z"}`,
			tool, strings.Repeat("a", 64), args)
		require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
		return path
	}
	eval := func(args ...string) map[string]any {
		out, err := exec.Command(bin, append([]string{"policy", "eval"}, args...)...).Output()
		require.NoError(t, err)
		var dec map[string]any
		require.NoError(t, json.Unmarshal(out, &dec), string(out))
		return dec
	}
	assert.Equal(t, true, eval("--input", input("echo", `{"message":"x"}`), "--config", cfgPath)["allow"])
	hidden := eval("--input", input("reset_notes", `{}`), "--config", cfgPath)
	assert.Equal(t, false, hidden["allow"])
	assert.Equal(t, true, hidden["hidden"])
	assert.Equal(t, false, eval("--input", input("echo", `{}`))["allow"], "without data the default policy exposes nothing")
	// The wasm engine makes the same decisions, with the cache where told.
	cache := filepath.Join(t.TempDir(), "wasm-cache")
	t.Setenv("XDG_CACHE_HOME", cache)
	for _, tool := range []string{"echo", "reset_notes"} {
		in := input(tool, `{"message":"x"}`)
		assert.Equal(t, eval("--input", in, "--config", cfgPath),
			eval("--input", in, "--config", cfgPath, "--engine", "wasm"), tool)
	}
	require.NoError(t, os.Chmod(filepath.Join(cache, "mcp-warden", "wasm"), 0o777))
	cmd := exec.Command(bin, "policy", "eval", "--engine", "wasm", "--input", input("echo", `{}`))
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a cache directory others may write is refused")
	assert.Contains(t, string(out), "writable by its group or others")

	cmd = exec.Command(bin, "policy", "eval", "--input", "/nonexistent/input.json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run())
	assert.Contains(t, stderr.String(), "/nonexistent/input.json")
}
