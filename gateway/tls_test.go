package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{t: t, cert: cert, key: key}
}

// issue signs a leaf certificate shaped by tmpl (serial, names, usage).
func (ca *testCA) issue(tmpl *x509.Certificate) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(ca.t, err)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(ca.t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(ca.t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func writePEM(t *testing.T, path, kind string, der []byte) string {
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

// mtlsFixture is a CA, the listener's files and a client certificate
// naming spiffe://example.org/agent/ci.
type mtlsFixture struct {
	ca, rogue  *testCA
	tls        ListenerTLSConfig
	client     tls.Certificate
	serverKey  []byte // PEM, to prove it is never logged
	clientKey  []byte
	clientCert *x509.Certificate
}

func newMTLSFixture(t *testing.T, require_ bool) *mtlsFixture {
	dir := t.TempDir()
	f := &mtlsFixture{ca: newTestCA(t, "warden test CA"), rogue: newTestCA(t, "rogue CA")}
	server := f.ca.issue(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gateway"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	spiffe, _ := url.Parse("spiffe://example.org/agent/ci")
	f.client = f.ca.issue(&x509.Certificate{SerialNumber: big.NewInt(0xc0ffee), Subject: pkix.Name{CommonName: "ci agent", Organization: []string{"Example"}},
		URIs: []*url.URL{spiffe}, DNSNames: []string{"ci.example.org"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	f.clientCert = f.client.Leaf
	serverKey, err := x509.MarshalPKCS8PrivateKey(server.PrivateKey)
	require.NoError(t, err)
	clientKey, err := x509.MarshalPKCS8PrivateKey(f.client.PrivateKey)
	require.NoError(t, err)
	f.serverKey = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: serverKey})
	f.clientKey = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: clientKey})
	f.tls = ListenerTLSConfig{
		CertFile:          writePEM(t, filepath.Join(dir, "tls.crt"), "CERTIFICATE", server.Certificate[0]),
		KeyFile:           writePEM(t, filepath.Join(dir, "tls.key"), "PRIVATE KEY", serverKey),
		ClientCAFile:      writePEM(t, filepath.Join(dir, "client-ca.pem"), "CERTIFICATE", f.ca.cert.Raw),
		RequireClientCert: require_,
	}
	return f
}

// serveTLS serves g's HTTP face with the listener TLS configuration Run
// uses.
func serveTLS(t *testing.T, g *Gateway, l ListenerTLSConfig) string {
	srv := httptest.NewUnstartedServer(g.HTTPHandler(policy.Principal{ID: g.cfg.Principal.ID}))
	srv.Config.ErrorLog = g.httpErrorLog("test-listener")
	c, err := l.TLSConfig()
	require.NoError(t, err)
	srv.TLS = c
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// client trusts f's CA and presents certs[0], whatever CAs the server
// names as acceptable (crypto/tls would otherwise send nothing for a
// certificate of another CA).
func (f *mtlsFixture) httpClient(token string, certs ...tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.cert)
	cfg := &tls.Config{RootCAs: pool}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	if token == "" {
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: bearerOver{token, tr}}
}

type bearerOver struct {
	token string
	next  http.RoundTripper
}

func (b bearerOver) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func callEcho(t *testing.T, ctx context.Context, url string, c *http.Client) (*mcp.CallToolResult, error) {
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: c}, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"message": "hi"}})
}

func TestMTLSClientCertificateNamesThePrincipal(t *testing.T) {
	f := newMTLSFixture(t, false)
	cfg := authConfig("")
	cfg.JWT = JWTConfig{}
	var oplog testenv.Buffer
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Auth: cfg,
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0", TLS: &f.tls}}},
		WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	url := serveTLS(t, g, f.tls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	principal := func() map[string]any {
		evs := log.events(t)
		require.NotEmpty(t, evs)
		return evs[len(evs)-1]["input"].(map[string]any)["principal"].(map[string]any)
	}

	// A verified certificate alone: its URI SAN is the principal.
	res, err := callEcho(t, ctx, url, f.httpClient("", f.client))
	require.NoError(t, err)
	assert.Equal(t, "hi", text(t, res))
	p := principal()
	assert.Equal(t, "spiffe://example.org/agent/ci", p["id"])
	assert.Equal(t, "mtls", p["auth_method"])
	assert.Equal(t, "streamable-http", p["transport"])
	claims := p["claims"].(map[string]any)
	assert.Equal(t, "CN=ci agent,O=Example", claims["subject"])
	assert.Equal(t, "CN=warden test CA", claims["issuer"])
	assert.Equal(t, "c0ffee", claims["serial"])
	assert.Equal(t, []any{"spiffe://example.org/agent/ci"}, claims["uris"])
	assert.Equal(t, []any{"ci.example.org"}, claims["dns_names"])

	// Certificate and API key: the bearer credential names the principal.
	_, err = callEcho(t, ctx, url, f.httpClient(ciToken, f.client))
	require.NoError(t, err)
	assert.Equal(t, "ci-bot", principal()["id"])
	assert.Equal(t, "api_key", principal()["auth_method"])

	// Certificate and a bad token: refused, the certificate does not
	// rescue it.
	for _, c := range []*http.Client{f.httpClient("not-a-key", f.client), f.httpClient("")} {
		req, err := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
		assert.NotContains(t, string(body), "demo")
	}
	assert.Contains(t, oplog.String(), "unknown API key")
	assert.Contains(t, oplog.String(), "no credentials", "without certificate or token, bearer auth refuses")

	// No secret or key material in either log.
	for _, logged := range []string{log.String(), oplog.String()} {
		assert.NotContains(t, logged, "PRIVATE KEY")
		assert.NotContains(t, logged, string(f.serverKey))
		assert.NotContains(t, logged, string(f.clientKey))
		assert.NotContains(t, logged, ciToken)
	}
}

func TestMTLSWithoutBearerAuth(t *testing.T) {
	f := newMTLSFixture(t, false)
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Principal: PrincipalConfig{ID: "local"},
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0", TLS: &f.tls}}}, WithPolicy(rego.Demo()))
	url := serveTLS(t, g, f.tls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		client     *http.Client
		id, method string
	}{
		{f.httpClient("", f.client), "spiffe://example.org/agent/ci", "mtls"},
		// An optional certificate not given: the configured principal,
		// and an Authorization header nobody checks is ignored.
		{f.httpClient("whatever"), "local", "none"},
	} {
		_, err := callEcho(t, ctx, url, tc.client)
		require.NoError(t, err)
		evs := log.events(t)
		p := evs[len(evs)-1]["input"].(map[string]any)["principal"].(map[string]any)
		assert.Equal(t, tc.id, p["id"])
		assert.Equal(t, tc.method, p["auth_method"])
	}
	// A certificate from another CA fails the handshake even when
	// certificates are optional.
	rogue := f.rogue.issue(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "intruder"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	_, err := f.httpClient("", rogue).Get(url + "/mcp")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown certificate authority")
}

func TestMTLSRequiredRefusesInTheHandshake(t *testing.T) {
	f := newMTLSFixture(t, true)
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)},
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0", TLS: &f.tls}}}, WithPolicy(rego.Demo()))
	url := serveTLS(t, g, f.tls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rogue := f.rogue.issue(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "intruder"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	for name, c := range map[string]*http.Client{"no certificate": f.httpClient(""), "another CA": f.httpClient("", rogue)} {
		_, err := callEcho(t, ctx, url, c)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), map[string]string{"no certificate": "certificate required", "another CA": "unknown certificate authority"}[name], name)
	}
	assert.Empty(t, log.events(t), "refused in the handshake: no decision was made")

	_, err := callEcho(t, ctx, url, f.httpClient("", f.client))
	require.NoError(t, err)
	require.Len(t, log.events(t), 1)
}

func TestListenerTLSValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		l    ListenerConfig
		want string
	}{
		"stdio":         {ListenerConfig{Stdio: true, TLS: &ListenerTLSConfig{CertFile: "c", KeyFile: "k"}}, "listeners[0].tls"},
		"no key":        {ListenerConfig{HTTP: "127.0.0.1:8443", TLS: &ListenerTLSConfig{CertFile: "c"}}, "needs both cert_file and key_file"},
		"require no CA": {ListenerConfig{HTTP: "127.0.0.1:8443", TLS: &ListenerTLSConfig{CertFile: "c", KeyFile: "k", RequireClientCert: true}}, "require_client_cert"},
		"CRL no CA":     {ListenerConfig{HTTP: "127.0.0.1:8443", TLS: &ListenerTLSConfig{CertFile: "c", KeyFile: "k", ClientCRLFile: "l"}}, "client_crl_file"},
	} {
		t.Run(name, func(t *testing.T) {
			err := (&Config{Servers: []ServerConfig{{Name: "x", Command: "/bin/true"}}, Listeners: []ListenerConfig{tc.l}}).Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestTLSHandshakeFailuresAreLoggedAndCounted: a client refused in the
// handshake appears in the operational log (remote address, reason) and in
// mcp_warden_tls_handshake_failures_total.
func TestTLSHandshakeFailuresAreLoggedAndCounted(t *testing.T) {
	f := newMTLSFixture(t, true)
	var oplog testenv.Buffer
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)},
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0", TLS: &f.tls}}}, WithPolicy(rego.Demo()),
		WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	url := serveTLS(t, g, f.tls)
	for range 2 {
		_, err := f.httpClient("").Get(url + "/mcp")
		require.Error(t, err)
	}
	require.Eventually(t, func() bool { return strings.Count(oplog.String(), "TLS handshake failed") == 2 }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, oplog.String(), "listener=test-listener remote=127.0.0.1:")
	assert.Contains(t, oplog.String(), "certificate")
	rec := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `mcp_warden_tls_handshake_failures_total{listener="test-listener"} 2`)
}

// revocationList is a CRL of ca revoking serials, valid until next.
func (ca *testCA) revocationList(next time.Time, serials ...int64) []byte {
	var entries []x509.RevocationListEntry
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: big.NewInt(s), RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(time.Now().UnixNano()),
		ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: next, RevokedCertificateEntries: entries}, ca.cert, ca.key)
	require.NoError(ca.t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

// TestMTLSRevocationListRefusesInTheHandshake: with client_crl_file, a
// revoked certificate, one of a CA without a list, and any certificate
// checked against an overdue list are refused in the handshake (logged);
// the file is read again when it changes; a list no client CA signed is a
// configuration error.
func TestMTLSRevocationListRefusesInTheHandshake(t *testing.T) {
	f := newMTLSFixture(t, false)
	other := newTestCA(t, "second client CA")
	caPEM, err := os.ReadFile(f.tls.ClientCAFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.tls.ClientCAFile, append(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.cert.Raw})...), 0o600))
	revoked := f.ca.issue(&x509.Certificate{SerialNumber: big.NewInt(0xbad), Subject: pkix.Name{CommonName: "stolen laptop"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	unlisted := other.issue(&x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "other agent"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	crlFile := filepath.Join(t.TempDir(), "client.crl")
	require.NoError(t, os.WriteFile(crlFile, f.ca.revocationList(time.Now().Add(time.Hour), 0xbad), 0o600))
	f.tls.ClientCRLFile = crlFile

	var oplog testenv.Buffer
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Principal: PrincipalConfig{ID: "local"},
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0", TLS: &f.tls}}}, WithPolicy(rego.Demo()),
		WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	url := serveTLS(t, g, f.tls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err = callEcho(t, ctx, url, f.httpClient("", f.client))
	require.NoError(t, err, "a certificate the list does not name")
	_, err = callEcho(t, ctx, url, f.httpClient(""))
	require.NoError(t, err, "no certificate, where certificates are optional")
	refused := func(c tls.Certificate, why string) {
		t.Helper()
		_, err := callEcho(t, ctx, url, f.httpClient("", c))
		require.Error(t, err)
		require.Eventually(t, func() bool { return strings.Contains(oplog.String(), why) }, 10*time.Second, 10*time.Millisecond, why)
	}
	refused(revoked, `client certificate \"CN=stolen laptop\" (serial bad) is revoked`)
	refused(unlisted, `has no revocation list of its issuer \"CN=second client CA\"`)
	require.Len(t, log.events(t), 2, "refused in the handshake: no decision")

	// The list changes: the next handshake reads it.
	require.NoError(t, os.WriteFile(crlFile, f.ca.revocationList(time.Now().Add(time.Hour), 0xbad, 0xc0ffee), 0o600))
	refused(f.client, `(serial c0ffee) is revoked`)
	// An overdue list refuses every certificate it covers.
	require.NoError(t, os.WriteFile(crlFile, f.ca.revocationList(time.Now().Add(-time.Minute)), 0o600))
	refused(f.client, "was due for renewal")

	// A list signed by no CA of client_ca_file does not load.
	bad := f.tls
	bad.ClientCRLFile = filepath.Join(t.TempDir(), "rogue.crl")
	require.NoError(t, os.WriteFile(bad.ClientCRLFile, f.rogue.revocationList(time.Now().Add(time.Hour)), 0o600))
	_, err = bad.TLSConfig()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the list of CN=rogue CA is not signed by a CA of client_ca_file`)
	bad.ClientCRLFile = f.tls.CertFile // a certificate, not a list
	_, err = bad.TLSConfig()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client_crl_file")
}
