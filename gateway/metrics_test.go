package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/rego"
)

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// runGateway runs g.Run until the test ends.
func runGateway(t *testing.T, g *Gateway) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-ran)
	})
}

func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	var resp *http.Response
	require.Eventually(t, func() bool {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err = http.DefaultClient.Do(req)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the listener comes up")
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// sample returns the value of the series named (with its labels) exactly
// as written in the exposition, or "" if it is absent.
func sample(exposition, series string) string {
	for line := range strings.Lines(exposition) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return rest
		}
	}
	return ""
}

func TestE2EMetricsAfterRealCalls(t *testing.T) {
	mcpAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg := &Config{
		Servers:   []ServerConfig{{Name: "missing", Command: "/nonexistent/mcp-server"}, demoServer(t)},
		Listeners: []ListenerConfig{{HTTP: mcpAddr}},
		Metrics:   MetricsConfig{HTTP: metricsAddr},
	}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()))
	runGateway(t, g)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs *mcp.ClientSession
	require.Eventually(t, func() bool {
		var err error
		cs, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: "http://" + mcpAddr + "/mcp"}, nil)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	defer cs.Close()
	_, err := cs.ListTools(ctx, nil) // four tools: three exposed, reset_notes not
	require.NoError(t, err)
	for range 3 {
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 1, "b": 2}})
		require.NoError(t, err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": "../etc/passwd"}})
	require.NoError(t, err)

	status, body := scrape(t, "http://"+metricsAddr+"/metrics", "")
	require.Equal(t, http.StatusOK, status)
	for series, want := range map[string]string{
		`mcp_warden_decisions_total{action="tools/call",result="allow"}`:             "3",
		`mcp_warden_decisions_total{action="tools/call",result="deny"}`:              "1",
		`mcp_warden_decisions_total{action="tools/list",result="allow"}`:             "3",
		`mcp_warden_decisions_total{action="tools/list",result="deny"}`:              "1",
		`mcp_warden_decision_duration_seconds_count{action="tools/call"}`:            "4",
		`mcp_warden_decision_duration_seconds_count{action="tools/list"}`:            "1",
		`mcp_warden_decision_duration_seconds_bucket{action="tools/call",le="+Inf"}`: "4",
		`mcp_warden_upstream_up{server="demo"}`:                                      "1",
		`mcp_warden_upstream_up{server="missing"}`:                                   "0",
		`mcp_warden_upstream_tools{server="demo"}`:                                   "4",
		`mcp_warden_decision_log_upload_dropped_total`:                               "0",
	} {
		assert.Equal(t, want, sample(body, series), series)
	}
	assert.Contains(t, body, "go_goroutines ")
	assert.Empty(t, sample(body, `mcp_warden_decisions_total{action="tools/call",result="error"}`), "no error yet")

	// The MCP listener does not serve metrics unless configured to.
	status, _ = scrape(t, "http://"+mcpAddr+"/metrics", "")
	assert.Equal(t, http.StatusNotFound, status)
}

// On an authenticated MCP listener, /metrics asks for the same credentials.
func TestMetricsOnAnAuthenticatedListener(t *testing.T) {
	addr := freeAddr(t)
	cfg := &Config{
		Servers:   []ServerConfig{demoServer(t)},
		Listeners: []ListenerConfig{{HTTP: addr}},
		Metrics:   MetricsConfig{HTTP: addr},
		Auth:      authConfig("https://idp.invalid/jwks"),
	}
	g, _ := startGateway(t, cfg, WithPolicy(rego.Demo()))
	runGateway(t, g)

	status, body := scrape(t, "http://"+addr+"/metrics", "")
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.NotContains(t, body, "demo")
	status, body = scrape(t, "http://"+addr+"/metrics", ciToken)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "1", sample(body, `mcp_warden_upstream_up{server="demo"}`))
}
