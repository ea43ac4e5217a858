package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// recordingProxy is an HTTP proxy on loopback, for plain HTTP requests
// (absolute-form) and CONNECT tunnels, that records what it was asked and
// with which Proxy-Authorization, and resolves names itself: hosts maps a
// name to the address it stands for.
type recordingProxy struct {
	*httptest.Server
	hosts     map[string]string
	transport *http.Transport
	wg        sync.WaitGroup // requests being served and tunnels

	mu   sync.Mutex
	seen []string // "<method> <host:port> <Proxy-Authorization>"
}

func startRecordingProxy(t *testing.T, hosts map[string]string) *recordingProxy {
	p := &recordingProxy{hosts: hosts, transport: &http.Transport{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.Close()
		p.transport.CloseIdleConnections()
		p.wg.Wait()
	})
	return p
}

func (p *recordingProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func (p *recordingProxy) target(hostport string) string {
	host, port, _ := net.SplitHostPort(hostport)
	if addr, ok := p.hosts[host]; ok {
		return net.JoinHostPort(addr, port)
	}
	return hostport
}

func (p *recordingProxy) serve(w http.ResponseWriter, r *http.Request) {
	// Counted from the start: Close stops waiting for a request once it
	// hijacks its connection, and the tunnel's Add must not race the Wait.
	p.wg.Add(1)
	defer p.wg.Done()
	p.mu.Lock()
	p.seen = append(p.seen, r.Method+" "+r.Host+" "+r.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if r.Method == http.MethodConnect {
		up, err := net.Dial("tcp", p.target(r.Host))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, down)
		go pipe(down, up)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Host = p.target(pr.In.URL.Host)
			pr.Out.Header.Del("Proxy-Authorization")
		},
		Transport:     p.transport,
		FlushInterval: -1,
	}).ServeHTTP(w, r)
}

// TestRemoteProxySettings: proxy and remote_proxy take none, environment
// or an http(s) proxy URL; a bad one is a configuration error naming the
// key that never shows the URL's password; a server inherits remote_proxy
// and defaults to none; a stdio server may not set one.
func TestRemoteProxySettings(t *testing.T) {
	for _, good := range []string{"none", "environment", "http://proxy.example:3128", "https://u:p@proxy.example"} {
		cfg := &Config{RemoteProxy: good, Servers: []ServerConfig{{Name: "remote", URL: "https://mcp.example.com/mcp", Proxy: good}}}
		assert.NoError(t, cfg.Validate(), good)
	}
	for _, bad := range []string{"socks5://warden:hunter2@proxy.example:1080", "http://warden:hunter2@proxy.example:3128/path", "http://warden:hunter2@proxy.example?x=1", "env", "proxy.example:3128"} {
		cfg := &Config{RemoteProxy: bad, Servers: []ServerConfig{{Name: "remote", URL: "https://mcp.example.com/mcp", Proxy: bad}}}
		errs := configProblems(t, cfg.Validate())
		require.Len(t, errs, 2, bad)
		assert.Equal(t, "remote_proxy", errs[0].Key)
		assert.Equal(t, "servers[0].proxy", errs[1].Key)
		assert.Contains(t, errs[0].Fix, "none, environment, or the proxy's URL")
		assert.NotContains(t, errs[0].Error(), "hunter2", "the password is not shown")
	}
	cfg := &Config{Servers: []ServerConfig{{Name: "local", Command: "x", Proxy: "environment"}}}
	assert.ErrorContains(t, cfg.Validate(), "proxy or ca_file without url")

	cfg = &Config{RemoteProxy: "environment", Servers: []ServerConfig{
		{Name: "a", URL: "https://a.example/mcp"}, {Name: "b", URL: "https://b.example/mcp", Proxy: "http://p.example:3128"}, {Name: "c", Command: "x"}}}
	d := cfg.withDefaults()
	assert.Equal(t, []string{"environment", "http://p.example:3128", ""}, []string{d.Servers[0].Proxy, d.Servers[1].Proxy, d.Servers[2].Proxy})
	cfg.RemoteProxy = ""
	assert.Equal(t, ProxyNone, cfg.withDefaults().Servers[0].Proxy, "directly by default")
}

// TestE2ERemoteUpstreamThroughProxy: remote servers configured with a proxy
// URL (with credentials) and with proxy: environment are reached through
// the proxy, which resolves their names (the gateway never does) and is
// itself on loopback without allow_private_network; the proxy password
// reaches neither log. A server with no proxy setting ignores the
// environment's proxy.
func TestE2ERemoteUpstreamThroughProxy(t *testing.T) {
	const password = "pr0xy-pa55-7c1d"
	remote := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	remote.AddTool(&mcp.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil
		})
	// Reached by a name that stands for loopback: no DNS-rebinding check.
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return remote },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	t.Cleanup(upstream.Close)
	_, port, _ := net.SplitHostPort(upstream.Listener.Addr().String())
	proxy := startRecordingProxy(t, map[string]string{"upstream.test": "127.0.0.1"})
	withCredentials := strings.Replace(proxy.URL, "http://", "http://warden:"+password+"@", 1)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")

	var logBuf testenv.Buffer
	endpoint := "http://upstream.test:" + port + "/mcp"
	g, decisions := startGateway(t, &Config{Servers: []ServerConfig{
		{Name: "configured", URL: endpoint, Proxy: withCredentials, Tools: ToolFilter{Allow: []string{"*"}}},
		{Name: "environment", URL: endpoint, Proxy: ProxyEnvironment, Tools: ToolFilter{Allow: []string{"*"}}},
	}}, WithLogger(slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	for _, st := range g.Status() {
		require.True(t, st.Running, "%s: %v", st.Name, st.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"configured__hello", "environment__hello"} {
		res, err := g.CallTool(ctx, alice, name, nil)
		require.NoError(t, err)
		assert.Equal(t, "hello", text(t, res), name)
	}

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("warden:"+password))
	var configured, fromEnv int
	for _, r := range proxy.requests() {
		assert.Contains(t, r, " upstream.test:"+port+" ", "the proxy is asked for the name, which it resolves")
		switch {
		case strings.HasSuffix(r, " "+auth):
			configured++
		case strings.HasSuffix(r, " "):
			fromEnv++
		}
	}
	assert.Positive(t, configured, "the configured proxy carried requests, with its credentials")
	assert.Positive(t, fromEnv, "the environment's proxy carried requests")
	assert.Contains(t, logBuf.String(), "remote server reached through a proxy")
	for what, out := range map[string]string{"log": logBuf.String(), "decision log": string(decisions.Bytes())} {
		assert.NotContains(t, out, password, what)
	}

	// No proxy setting: the environment's proxy is not used, and the
	// gateway resolves the name itself (here it cannot).
	before := len(proxy.requests())
	g2, err := New(&Config{Servers: []ServerConfig{{Name: "direct", URL: endpoint, AllowPrivateNetwork: true}}})
	require.NoError(t, err)
	defer g2.Close()
	startCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	assert.Error(t, g2.Start(startCtx), "upstream.test resolves nowhere for the gateway")
	assert.Len(t, proxy.requests(), before, "the environment's proxy was not asked")
}

// TestRemoteProxyAndPrivateNetworks: through a proxy, a request whose host
// is a refused address (or localhost) is refused before the proxy is asked,
// on every request, unless the entry allows private networks; the proxy
// itself may be on loopback. A CONNECT tunnel (https) is asked for the
// server's name and carries the proxy credentials.
func TestRemoteProxyAndPrivateNetworks(t *testing.T) {
	proxy := startRecordingProxy(t, map[string]string{"upstream.test": "127.0.0.1"})
	p, err := newRemoteProxy(strings.Replace(proxy.URL, "http://", "http://warden:secret@", 1))
	require.NoError(t, err)
	assert.Equal(t, strings.Replace(proxy.URL, "http://", "http://warden:xxxxx@", 1), p.shown)
	client := remoteHTTPClient(ServerConfig{Name: "remote"}, nil, p, nil)
	for _, target := range []string{"http://10.1.2.3/mcp", "http://169.254.169.254/latest", "http://localhost:9/mcp", "http://[::1]:9/mcp"} {
		_, err := client.Get(target)
		var blocked *BlockedAddressError
		require.ErrorAs(t, err, &blocked, target)
		assert.Equal(t, "remote", blocked.Server)
	}
	assert.Empty(t, proxy.requests(), "the proxy was never asked for a refused address")

	tlsUpstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	tlsUpstream.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake fails by design
	tlsUpstream.StartTLS()
	defer tlsUpstream.Close()
	_, port, _ := net.SplitHostPort(tlsUpstream.Listener.Addr().String())
	_, err = client.Get("https://upstream.test:" + port + "/mcp")
	require.Error(t, err, "the test server's certificate is not trusted")
	assert.Contains(t, err.Error(), "certificate", "the tunnel reached the server's TLS")
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("warden:secret"))
	assert.Equal(t, []string{"CONNECT upstream.test:" + port + " " + auth}, proxy.requests())

	// With the server's CA (ca_file), the tunnel carries the whole
	// request: CONNECT end to end, the certificate checked for the name.
	viaCA := startRecordingProxy(t, map[string]string{"example.com": "127.0.0.1"})
	pCA, err := newRemoteProxy(viaCA.URL)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsUpstream.Certificate().Raw}), 0o600))
	roots, err := loadCAFile(caFile)
	require.NoError(t, err)
	resp, err := remoteHTTPClient(ServerConfig{Name: "remote"}, nil, pCA, roots).Get("https://example.com:" + port + "/mcp")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, []string{"CONNECT example.com:" + port + " "}, viaCA.requests(), "no credentials")
	_, err = loadCAFile(tlsUpstream.URL)
	require.Error(t, err)
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	_, err = loadCAFile(notPEM)
	require.ErrorContains(t, err, "holds no PEM certificate")

	allowed := remoteHTTPClient(ServerConfig{Name: "remote", AllowPrivateNetwork: true}, nil, p, nil)
	resp, err = allowed.Get("http://localhost:9/")
	if err == nil {
		resp.Body.Close()
	}
	assert.Len(t, proxy.requests(), 2, "allowed by the entry: the proxy is asked")
	client.CloseIdleConnections()
	allowed.CloseIdleConnections()
}

// ca_file is for remote https servers only, and an unreadable or empty one
// keeps the server from starting with a clear reason.
func TestRemoteCAFileSettings(t *testing.T) {
	for _, tc := range []struct {
		sc   ServerConfig
		want string
	}{
		{ServerConfig{Name: "plain", URL: "http://mcp.example.com/mcp", CAFile: "ca.pem"}, "servers[0].ca_file: is set for a URL that is not https"},
		{ServerConfig{Name: "local", Command: "x", CAFile: "ca.pem"}, "ca_file without url"},
	} {
		assert.ErrorContains(t, (&Config{Servers: []ServerConfig{tc.sc}}).Validate(), tc.want)
	}
	require.NoError(t, (&Config{Servers: []ServerConfig{{Name: "private", URL: "https://mcp.example.com/mcp", CAFile: "ca.pem"}}}).Validate())
	g, err := New(&Config{Servers: []ServerConfig{{Name: "private", URL: "https://mcp.example.com/mcp", CAFile: filepath.Join(t.TempDir(), "missing.pem")}}})
	require.NoError(t, err)
	defer g.Close()
	err = g.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `server "private": ca_file:`)
}
