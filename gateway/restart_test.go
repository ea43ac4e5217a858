package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// scrapeGateway reads g's metrics exposition.
func scrapeGateway(g *Gateway) string {
	rec := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// killServer SIGKILLs every process of the server run as command (not its
// sandbox init) carrying the marker sc was started with, and returns their
// pids.
func killServer(t *testing.T, sc ServerConfig, arg string) []int {
	t.Helper()
	value := sc.Env[testenv.MarkerKey]
	require.NotEmpty(t, value)
	var pids []int
	for _, p := range testenv.Processes(testenv.MarkerKey, value) {
		if slices.Contains(p.Argv, arg) {
			require.NoError(t, syscall.Kill(p.Pid, syscall.SIGKILL))
			pids = append(pids, p.Pid)
		}
	}
	require.NotEmpty(t, pids, "the server runs")
	return pids
}

func TestE2EKilledServerIsRestarted(t *testing.T) {
	sc := demoServer(t)
	sc.Restart = RestartConfig{Backoff: 50 * time.Millisecond}
	logs := &testenv.Buffer{}
	cfg := &Config{Servers: []ServerConfig{sc}}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	sc = cfg.Servers[0] // with the marker startGateway added

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var changed atomic.Int32
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "watcher"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed.Add(1) },
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: serveHTTP(t, g) + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()
	before, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, before.Tools)

	killed := killServer(t, sc, "demo-server")
	testenv.RequireGone(t, killed...)
	require.Eventually(t, func() bool {
		m := scrapeGateway(g)
		return sample(m, `mcp_warden_upstream_restarts_total{server="demo"}`) == "1" &&
			sample(m, `mcp_warden_upstream_up{server="demo"}`) == "1"
	}, 30*time.Second, 20*time.Millisecond, "restarted: %s", logs)

	res, err := g.CallTool(ctx, alice, "demo__echo", map[string]any{"message": "back again"})
	require.NoError(t, err)
	require.False(t, res.IsError, text(t, res))
	assert.Equal(t, "back again", text(t, res))
	after, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, toolNames(before.Tools), toolNames(after.Tools), "the same tools, under the same policy")
	assert.Eventually(t, func() bool { return changed.Load() >= 2 }, 10*time.Second, 20*time.Millisecond,
		"the client heard its list change when the server went and when it came back")
	assert.True(t, g.Status()[0].Running)
	assert.Contains(t, logs.String(), `"msg":"server exited; restarting","server":"demo","attempt":1,"exit":"server \"demo\" killed by signal: killed"`)
	assert.Contains(t, logs.String(), `"msg":"server restarted","server":"demo","attempt":1`)
	for _, pid := range killServer(t, sc, "demo-server") {
		assert.NotContains(t, killed, pid, "a new process")
	}
}

func TestE2EServerCrashingOnEveryRestartIsGivenUp(t *testing.T) {
	// The command is a link: pointed at the demo server for the first
	// start, then at a server that exits at once.
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	link := filepath.Join(dir, "server")
	require.NoError(t, os.Symlink(testenv.BuildGo(t, "./cmd/mcp-warden"), link))
	crasher := testenv.BuildGo(t, "./testdata/servers/crasher")

	sc := demoServer(t)
	sc.Command = link
	sc.Restart = RestartConfig{MaxAttempts: 2, Backoff: 20 * time.Millisecond}
	logs := &testenv.Buffer{}
	cfg := &Config{Servers: []ServerConfig{sc}}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	sc = cfg.Servers[0]

	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(crasher, link))
	killServer(t, sc, "demo-server")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "server down, not restarted") },
		30*time.Second, 20*time.Millisecond, "given up: %s", logs)

	assert.Equal(t, 2, strings.Count(logs.String(), `"msg":"server exited; restarting"`), "two attempts: %s", logs)
	assert.Contains(t, logs.String(), `"attempt":2,"exit":"server \"demo\": MCP handshake: server exited during start-up (server \"demo\" exited with status 3)`)
	assert.Contains(t, logs.String(), `"msg":"server down, not restarted","server":"demo"`)
	m := scrapeGateway(g)
	assert.Equal(t, "0", sample(m, `mcp_warden_upstream_up{server="demo"}`))
	assert.Equal(t, "0", sample(m, `mcp_warden_upstream_restarts_total{server="demo"}`))
	st := g.Status()[0]
	assert.False(t, st.Running)
	assert.ErrorContains(t, st.Err, "not restarted after 2 attempts")
	assert.ErrorContains(t, st.Err, "exited with status 3")
	tools, err := g.ListTools(context.Background(), alice)
	require.NoError(t, err)
	assert.Empty(t, tools, "a server that is down lists nothing")
	_, err = g.CallTool(context.Background(), alice, "demo__echo", map[string]any{"message": "x"})
	assert.ErrorContains(t, err, "unknown tool")
}

func TestE2ECloseDuringRestartBackoff(t *testing.T) {
	sc := demoServer(t)
	sc.Restart = RestartConfig{Backoff: time.Hour}
	logs := &testenv.Buffer{}
	cfg := &Config{Servers: []ServerConfig{sc}}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	sc = cfg.Servers[0]

	killServer(t, sc, "demo-server")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"server exited; restarting"`) },
		30*time.Second, 20*time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the restart backoff")
	}
	testenv.RequireNoProcess(t, testenv.MarkerKey, sc.Env[testenv.MarkerKey])
	assert.NotContains(t, logs.String(), "server restarted")
}

func TestRestartBackoffDoublesToItsCap(t *testing.T) {
	rc := RestartConfig{}.withDefaults()
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, rc.delay(n))
	}
	s := time.Second
	assert.Equal(t, []time.Duration{s / 2, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s}, got)
	assert.Equal(t, RestartOnFailure, rc.Policy)
	assert.Equal(t, DefaultRestartAttempts, rc.MaxAttempts)
}

// loadOneServer loads a config file of one stdio server with the YAML
// line entry (a key of the server entry, in flow style) added.
func loadOneServer(t *testing.T, entry string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "warden.yaml")
	require.NoError(t, os.WriteFile(path, []byte("servers:\n  - name: s\n    command: /bin/true\n    "+entry+"\n"), 0o600))
	return LoadConfig(path)
}

// requireConfigError requires err to be a *ConfigError at key whose
// problem contains problem, and which says how to fix it.
func requireConfigError(t *testing.T, err error, key, problem string) {
	t.Helper()
	var ce *ConfigError
	require.True(t, errors.As(err, &ce), "a *ConfigError: %v", err)
	assert.Equal(t, key, ce.Key)
	assert.Contains(t, ce.Problem, problem)
	assert.NotEmpty(t, ce.Fix)
}

func TestRestartConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		yaml, key, problem string
	}{
		{"restart: {policy: always}", "servers[0].restart.policy", `"always" is not a restart policy`},
		{"restart: {max_attempts: -1}", "servers[0].restart.max_attempts", "negative"},
		{"restart: {backoff: -1s}", "servers[0].restart.backoff", "negative"},
		{"restart: {max_backoff: -1s}", "servers[0].restart.max_backoff", "negative"},
		{"restart: {tries: 3}", "servers[0].restart.tries", ""},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := loadOneServer(t, tc.yaml)
			requireConfigError(t, err, tc.key, tc.problem)
		})
	}
	remote := &Config{Servers: []ServerConfig{{Name: "r", URL: "https://example.com/mcp", Restart: RestartConfig{Policy: RestartNever}}}}
	var ce *ConfigError
	require.True(t, errors.As(remote.Validate(), &ce))
	assert.Equal(t, "servers[0].restart", ce.Key)
}
