package gateway

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// TestE2EMixedRealUpstreams puts the official npm servers behind one
// gateway: server-everything over stdio and, as a separate process, in its
// streamableHttp mode as a remote upstream, plus server-memory and
// server-filesystem. Both everything instances offer the same tool names;
// prefix naming keeps them apart. A real client over the gateway's HTTP
// face lists and calls tools of every upstream.
func TestE2EMixedRealUpstreams(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o755))
	require.NoError(t, os.Chmod(root, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from disk"), 0o644))

	everyCmd, everyArgs := testenv.NodeCommand(t, "mcp-server-everything")
	remote := startOnFreePort(t, func(addr string) *exec.Cmd {
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(everyCmd, append(everyArgs, "streamableHttp")...)
		cmd.Env = append(os.Environ(), "PORT="+port)
		return cmd
	})
	memCmd, memArgs := testenv.NodeCommand(t, "mcp-server-memory")
	fsCmd, fsArgs := testenv.NodeCommand(t, "mcp-server-filesystem")
	cfg := &Config{
		Naming: NamingPrefix,
		Servers: []ServerConfig{
			{Name: "local", Command: everyCmd, Args: append(everyArgs, "stdio"), Tools: ToolFilter{Allow: []string{"echo", "get-sum"}}},
			{Name: "remote", URL: "http://" + remote + "/mcp", AllowPrivateNetwork: true, Tools: ToolFilter{Allow: []string{"echo", "get-sum"}}},
			{Name: "memory", Command: memCmd, Args: memArgs, Tools: ToolFilter{Allow: []string{"create_entities", "read_graph"}},
				Env:     map[string]string{"MEMORY_FILE_PATH": filepath.Join(root, "memory.jsonl")},
				Sandbox: sandbox.Profile{ReadWrite: []string{root}}},
			{Name: "files", Command: fsCmd, Args: append(fsArgs, root), Tools: ToolFilter{Allow: []string{"read_text_file", "list_directory"}},
				Sandbox: sandbox.Profile{ReadOnly: []string{root}}},
		},
	}
	g, log := startGateway(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mixed"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: serveHTTP(t, g) + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()

	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"files__list_directory", "files__read_text_file",
		"local__echo", "local__get-sum",
		"memory__create_entities", "memory__read_graph",
		"remote__echo", "remote__get-sum",
	}, toolNames(list.Tools))

	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err, name)
		require.False(t, res.IsError, "%s: %s", name, text(t, res))
		return text(t, res)
	}
	assert.Contains(t, call("local__echo", map[string]any{"message": "over stdio"}), "over stdio")
	assert.Contains(t, call("remote__echo", map[string]any{"message": "over streamable HTTP"}), "over streamable HTTP")
	assert.Contains(t, call("local__get-sum", map[string]any{"a": 2, "b": 3}), "5")
	assert.Contains(t, call("remote__get-sum", map[string]any{"a": 20, "b": 22}), "42")
	call("memory__create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "warden", "entityType": "gateway", "observations": []any{"guards tools"}},
	}})
	assert.Contains(t, call("memory__read_graph", nil), "guards tools")
	assert.Equal(t, "hello from disk", call("files__read_text_file", map[string]any{"path": filepath.Join(root, "hello.txt")}))
	assert.Contains(t, call("files__list_directory", map[string]any{"path": root}), "hello.txt")

	// The unprefixed name is no tool: each upstream's tools are reached
	// only through its own prefix.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "x"}})
	assert.ErrorContains(t, err, "unknown tool")

	calls := 0
	for _, ev := range log.events(t) {
		if ev["input"].(map[string]any)["action"] == "tools/call" {
			calls++
		}
	}
	assert.Equal(t, 8, calls, "one decision per call that reached an upstream")
}
