package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// TestRemoteURLsToPrivateNetworksAreRefused: a remote server entry whose
// URL names a loopback, private, link-local, shared or metadata address is
// a *ConfigError naming the entry, unless the entry allows it.
func TestRemoteURLsToPrivateNetworksAreRefused(t *testing.T) {
	for _, u := range []string{
		"http://127.0.0.1:3000/mcp", "http://[::1]/mcp", "http://localhost:8080/mcp", "http://api.localhost/mcp",
		"http://10.1.2.3/mcp", "http://172.16.0.1/mcp", "http://192.168.1.1/mcp", "http://[fd00::1]/mcp",
		"http://169.254.169.254/latest/meta-data", "http://[fe80::1]/mcp", "http://100.100.100.200/mcp",
		"http://0.0.0.0/mcp", "http://[::ffff:127.0.0.1]/mcp",
	} {
		t.Run(u, func(t *testing.T) {
			cfg := &Config{Servers: []ServerConfig{{Name: "remote", URL: u}}}
			err := cfg.Validate()
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "servers[0].url", ce.Key)
			assert.Contains(t, ce.Problem, "where remote servers are refused (SSRF)")
			assert.Contains(t, ce.Fix, "allow_private_network: true")

			cfg.Servers[0].AllowPrivateNetwork = true
			assert.NoError(t, cfg.Validate(), "allowed by the entry")
		})
	}
	cfg := &Config{Servers: []ServerConfig{{Name: "remote", URL: "https://mcp.example.com/mcp"}}}
	assert.NoError(t, cfg.Validate(), "a public name")
	cfg = &Config{Servers: []ServerConfig{{Name: "local", Command: "x", AllowPrivateNetwork: true}}}
	assert.ErrorContains(t, cfg.Validate(), "without url")
}

// TestRemoteDialsToPrivateNetworksAreRefused: the check holds on the
// address actually dialled, whatever name led there.
func TestRemoteDialsToPrivateNetworksAreRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()

	_, err := remoteHTTPClient(ServerConfig{Name: "remote"}, nil, nil, nil).Get(srv.URL)
	var blocked *BlockedAddressError
	require.ErrorAs(t, err, &blocked)
	assert.Equal(t, "remote", blocked.Server)
	assert.Equal(t, "a loopback address", blocked.Why)
	assert.Contains(t, err.Error(), `server "remote": 127.0.0.1:`)

	resp, err := remoteHTTPClient(ServerConfig{Name: "remote", AllowPrivateNetwork: true}, nil, nil, nil).Get(srv.URL)
	require.NoError(t, err, "allowed by the entry")
	resp.Body.Close()

	// Start through a name: this host's own name, where it resolves to a
	// refused address (it does in most containers and CI machines).
	host, err := os.Hostname()
	require.NoError(t, err)
	addrs, err := net.LookupHost(host)
	if err != nil || len(addrs) == 0 || blockedHost(addrs[0]) == "" {
		t.Logf("%s resolves to %v: no name to test the start with", host, addrs)
		return
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g, err := New(&Config{Servers: []ServerConfig{{Name: "sneaky", URL: "http://" + host + ":" + port + "/mcp"}}})
	require.NoError(t, err, "a name passes validation")
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = g.Start(ctx)
	require.ErrorAs(t, err, &blocked, "and is refused when dialled")
	assert.Equal(t, "sneaky", blocked.Server)
}

// TestE2ERemoteUpstreamHeadersFromHostSecrets: a remote server, over
// streamable HTTP and over HTTP+SSE, gets the configured headers, secret
// ones read from a host variable and a file; neither secret reaches the
// gateway's log or its decision log, and the client's own Authorization is
// never forwarded.
func TestE2ERemoteUpstreamHeadersFromHostSecrets(t *testing.T) {
	const token, apiKey = "tok-5f0e7c1d9a", "key-93be2a61c4"
	remote := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	remote.AddTool(&mcp.Tool{Name: "headers", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "seen"}}}, nil
		})
	// What the remote server was sent, per endpoint: the headers of every
	// request, as one set of distinct values per header.
	var mu sync.Mutex
	seen := map[string]map[string][]string{}
	record := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if seen[r.URL.Path] == nil {
				seen[r.URL.Path] = map[string][]string{}
			}
			for _, name := range []string{"Authorization", "X-Api-Key", "X-Client"} {
				if v := r.Header.Get(name); !slices.Contains(seen[r.URL.Path][name], v) {
					seen[r.URL.Path][name] = append(seen[r.URL.Path][name], v)
				}
			}
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", record(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return remote }, nil)))
	mux.Handle("/sse", record(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return remote }, nil)))
	upstream := httptest.NewServer(mux)
	t.Cleanup(upstream.Close) // after the gateway's (its SSE streams hold it)

	t.Setenv("MCP_WARDEN_TEST_REMOTE_TOKEN", token)
	keyFile := filepath.Join(t.TempDir(), "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600))
	remoteServer := func(name, path, transport string) ServerConfig {
		return ServerConfig{Name: name, URL: upstream.URL + path, Transport: transport, AllowPrivateNetwork: true,
			Tools:   ToolFilter{Allow: []string{"*"}},
			Headers: map[string]string{"X-Client": "mcp-warden"},
			HeaderSecrets: map[string]HeaderSecret{
				"Authorization": {Env: "MCP_WARDEN_TEST_REMOTE_TOKEN", Prefix: "Bearer "},
				"X-Api-Key":     {File: keyFile},
			}}
	}
	var logBuf testenv.Buffer
	g, decisions := startGateway(t, &Config{Servers: []ServerConfig{
		remoteServer("stream", "/mcp", RemoteStreamableHTTP), remoteServer("sse", "/sse", RemoteSSE),
	}}, WithLogger(slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	for _, st := range g.Status() {
		require.True(t, st.Running, "%s: %v", st.Name, st.Err)
	}

	srv := httptest.NewServer(g.HTTPHandler(alice))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{"client-own-credential"}}}, nil)
	require.NoError(t, err)
	defer client.Close()
	for _, name := range []string{"stream__headers", "sse__headers"} {
		res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: name})
		require.NoError(t, err)
		assert.Equal(t, "seen", text(t, res), name)
	}
	mu.Lock()
	for _, path := range []string{"/mcp", "/sse"} {
		assert.Equal(t, map[string][]string{"Authorization": {"Bearer " + token}, "X-Api-Key": {apiKey}, "X-Client": {"mcp-warden"}},
			seen[path], "every request to %s carried the configured headers and nothing of the client's", path)
	}
	mu.Unlock()
	for what, out := range map[string]string{"log": logBuf.String(), "decision log": string(decisions.Bytes())} {
		assert.NotContains(t, out, token, what)
		assert.NotContains(t, out, apiKey, what)
		assert.NotContains(t, out, "client-own-credential", what)
	}
}

// TestRemoteHeaderSecretsMissing: a header secret that cannot be read keeps
// that server from starting, with an error naming the server, the header
// and the source, and no value.
func TestRemoteHeaderSecretsMissing(t *testing.T) {
	sc := ServerConfig{Name: "remote", URL: "https://mcp.example.com/mcp", HeaderSecrets: map[string]HeaderSecret{
		"Authorization": {Env: "MCP_WARDEN_TEST_UNSET_TOKEN"},
		"X-Api-Key":     {File: filepath.Join(t.TempDir(), "missing")},
	}}
	_, _, err := sc.remoteHeaders(func(string) (string, bool) { return "", false }, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `server "remote": header Authorization: host variable MCP_WARDEN_TEST_UNSET_TOKEN is not set`)
	assert.Contains(t, err.Error(), `server "remote": header X-Api-Key: read `)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the file's absence is reachable: %v", err)

	bad := &Config{Servers: []ServerConfig{{Name: "remote", URL: "https://mcp.example.com/mcp",
		HeaderSecrets: map[string]HeaderSecret{"Authorization": {Env: "A", File: "/b"}}}}}
	assert.ErrorContains(t, bad.Validate(), "needs exactly one of env and file")
}
