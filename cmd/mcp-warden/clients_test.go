package main

// Real MCP clients (the official TypeScript SDK, the MCP Inspector CLI)
// against the gateway binary serving streamable HTTP, in front of the demo
// server and the go-sdk conformance everything-server, under the default
// library plus the demo rules.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// startClientsGateway runs `mcp-warden serve` on a loopback port with the
// demo server (reset_notes hidden, private notes denied by the demo rules)
// and the everything-server (one tool, one resource, one prompt exposed),
// and returns its MCP URL and the decision log's path.
func startClientsGateway(t *testing.T) (url, logPath string) {
	t.Helper()
	root := testenv.RepoRoot(t)
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	for _, from := range []string{"rego/library", "rego/demo"} {
		to := filepath.Join(policyDir, filepath.Base(from))
		require.NoError(t, os.MkdirAll(to, 0o755))
		files, err := filepath.Glob(filepath.Join(root, from, "*.rego"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.rego") {
				continue
			}
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(to, filepath.Base(f)), data, 0o644))
		}
	}
	key, value := testenv.Marker(t)
	logPath = filepath.Join(dir, "decisions.log")
	cfg := fmt.Sprintf(`servers:
  - name: demo
    command: %s
    args: [demo-server]
    env: {%s: %q}
    tools: {allow: ["*"], block: [reset_notes]}
  - name: everything
    command: %s
    env: {%s: %q}
    tools: {allow: [test_simple_text]}
    resources: {allow: ["test://static-text"]}
    prompts: {allow: [test_simple_prompt]}
policy: {path: %s}
decision_log: {path: %s}
principal: {id: alice}
`, testenv.BuildGo(t, "./cmd/mcp-warden"), key, value,
		testenv.BuildGo(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"), key, value,
		policyDir, logPath)
	cfgPath := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
	cmd, url := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0")
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		testenv.RequireNoProcess(t, key, value)
	})
	return url, logPath
}

type tsStep struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

type tsOutcome struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func TestE2ETypeScriptClient(t *testing.T) {
	url, logPath := startClientsGateway(t)
	steps := []tsStep{
		{"tools/list", nil},
		{"tools/call", map[string]any{"name": "demo__echo", "arguments": map[string]any{"message": "from TypeScript"}}},
		{"tools/call", map[string]any{"name": "everything__test_simple_text", "arguments": map[string]any{}}},
		{"resources/list", nil},
		{"resources/read", map[string]any{"uri": "test://static-text"}},
		{"prompts/list", nil},
		{"prompts/get", map[string]any{"name": "everything__test_simple_prompt"}},
		{"tools/call", map[string]any{"name": "demo__read_note", "arguments": map[string]any{"name": "private/diary"}}},
		{"tools/call", map[string]any{"name": "demo__reset_notes", "arguments": map[string]any{}}},
		{"resources/read", map[string]any{"uri": "test://static-binary"}},
	}
	stepsPath := filepath.Join(t.TempDir(), "steps.json")
	data, err := json.Marshal(steps)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stepsPath, data, 0o600))

	cmd := exec.Command(testenv.Node(t), filepath.Join(testenv.RepoRoot(t), "testdata", "clients", "typescript-sdk.cjs"), url, stepsPath)
	cmd.Env = append(os.Environ(), "NODE_PATH="+testenv.NodeModules(t))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "client failed:\n%s", stderr.String())
	var got struct {
		Server  map[string]any `json:"server"`
		Results []tsOutcome    `json:"results"`
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	require.Len(t, got.Results, len(steps))
	for i, r := range got.Results[:7] {
		require.Nil(t, r.Error, "step %d (%s) failed: %+v", i, steps[i].Method, r.Error)
	}
	assert.NotEmpty(t, got.Server["name"], "the client saw the gateway's serverInfo")

	var tools struct{ Tools []struct{ Name string } }
	require.NoError(t, json.Unmarshal(got.Results[0].Result, &tools))
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"demo__echo", "demo__add", "demo__read_note", "everything__test_simple_text"}, names)

	type callResult struct {
		IsError bool `json:"isError"`
		Content []struct{ Type, Text string }
	}
	var echo, simple, denied callResult
	require.NoError(t, json.Unmarshal(got.Results[1].Result, &echo))
	assert.False(t, echo.IsError)
	assert.Equal(t, "from TypeScript", echo.Content[0].Text)
	require.NoError(t, json.Unmarshal(got.Results[2].Result, &simple))
	assert.False(t, simple.IsError)
	assert.NotEmpty(t, simple.Content[0].Text)

	var resources struct{ Resources []struct{ URI string } }
	require.NoError(t, json.Unmarshal(got.Results[3].Result, &resources))
	require.Len(t, resources.Resources, 1, "only the allowed resource is listed")
	assert.Equal(t, "test://static-text", resources.Resources[0].URI)
	var read struct{ Contents []struct{ URI, Text string } }
	require.NoError(t, json.Unmarshal(got.Results[4].Result, &read))
	require.Len(t, read.Contents, 1)
	assert.NotEmpty(t, read.Contents[0].Text)

	var prompts struct{ Prompts []struct{ Name string } }
	require.NoError(t, json.Unmarshal(got.Results[5].Result, &prompts))
	require.Len(t, prompts.Prompts, 1)
	assert.Equal(t, "everything__test_simple_prompt", prompts.Prompts[0].Name)
	var prompt struct {
		Messages []struct{ Content struct{ Text string } }
	}
	require.NoError(t, json.Unmarshal(got.Results[6].Result, &prompt))
	require.NotEmpty(t, prompt.Messages)
	assert.Equal(t, "This is a simple prompt for testing.", prompt.Messages[0].Content.Text)

	// A denial is a tool result with isError and the policy's reason.
	require.Nil(t, got.Results[7].Error)
	require.NoError(t, json.Unmarshal(got.Results[7].Result, &denied))
	assert.True(t, denied.IsError)
	assert.Contains(t, denied.Content[0].Text, "not readable through the gateway")
	// A hidden tool is an unknown tool; a resource outside the allow list is refused.
	require.NotNil(t, got.Results[8].Error, "a hidden tool must not be callable")
	assert.Contains(t, got.Results[8].Error.Message, "unknown tool")
	require.NotNil(t, got.Results[8].Error.Code)
	assert.Equal(t, -32602, *got.Results[8].Error.Code)
	require.NotNil(t, got.Results[9].Error, "a resource outside the allow list must not be readable")

	// Every decision the client caused is in the log, the denial among them.
	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	for _, action := range []string{`"action":"tools/call"`, `"action":"resources/read"`, `"action":"prompts/get"`, "not readable through the gateway"} {
		assert.Contains(t, string(log), action)
	}
}

// inspector runs the MCP Inspector CLI against url with args and returns
// its standard output, standard error and exit code.
func inspector(t *testing.T, url string, args ...string) (stdout, stderrText string, code int) {
	t.Helper()
	command, base := testenv.Inspector(t)
	cmd := exec.Command(command, append(append(base, url, "--transport", "http"), args...)...)
	// Its catalog of servers goes to a temporary home, not the user's.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("inspector %v: %v", args, err)
	}
	if exit != nil {
		code = exit.ExitCode()
	}
	t.Logf("inspector %v: exit %d\nstdout: %s\nstderr: %s", args, code, out.String(), stderr.String())
	return out.String(), stderr.String(), code
}

func TestE2EInspectorCLI(t *testing.T) {
	url, _ := startClientsGateway(t)

	out, _, code := inspector(t, url, "--method", "tools/list")
	require.Equal(t, 0, code)
	var list struct{ Tools []struct{ Name string } }
	require.NoError(t, json.NewDecoder(strings.NewReader(out)).Decode(&list), out)
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"demo__echo", "demo__add", "demo__read_note", "everything__test_simple_text"}, names)

	out, _, code = inspector(t, url, "--method", "tools/call", "--tool-name", "demo__add", "--tool-arg", "a=2", "b=3")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "5")

	out, _, code = inspector(t, url, "--method", "resources/read", "--uri", "test://static-text")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "test://static-text")

	out, _, code = inspector(t, url, "--method", "prompts/get", "--prompt-name", "everything__test_simple_prompt")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "This is a simple prompt for testing.")

	// The Inspector exits 5 when a tool call fails: a denial is a result
	// with isError and the policy's reason, a hidden tool is not found.
	out, stderr, code := inspector(t, url, "--method", "tools/call", "--tool-name", "demo__read_note", "--tool-arg", "name=private/diary")
	assert.Equal(t, 5, code, "a denied call is a failed call")
	assert.Contains(t, out, "denied by policy: notes under private/")
	assert.Contains(t, stderr, "tool_is_error")

	_, stderr, code = inspector(t, url, "--method", "tools/call", "--tool-name", "demo__reset_notes")
	assert.Equal(t, 5, code, "a hidden tool cannot be called")
	assert.Contains(t, stderr, "tool_not_found")
}
