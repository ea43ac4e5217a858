package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/gateway"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

func TestTLSFlagsApplyToHTTPListeners(t *testing.T) {
	flags := gateway.ListenerTLSConfig{CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem", RequireClientCert: true}
	cfg := &gateway.Config{Listeners: []gateway.ListenerConfig{{Stdio: true}, {HTTP: ":1"}, {HTTP: ":2"}}}
	require.NoError(t, applyTLSFlags(cfg, flags))
	assert.Nil(t, cfg.Listeners[0].TLS)
	assert.Equal(t, flags, *cfg.Listeners[1].TLS)
	assert.Equal(t, flags, *cfg.Listeners[2].TLS)
	assert.NotSame(t, cfg.Listeners[1].TLS, cfg.Listeners[2].TLS)

	require.NoError(t, applyTLSFlags(&gateway.Config{}, gateway.ListenerTLSConfig{}), "no flags, nothing to do")
	for flags, want := range map[gateway.ListenerTLSConfig]string{
		{CertFile: "c.pem"}:      "--tls-cert and --tls-key go together",
		{ClientCAFile: "ca.pem"}: "--tls-cert and --tls-key go together",
		{CertFile: "c", KeyFile: "k", RequireClientCert: true}: "needs --tls-client-ca",
		{CertFile: "c", KeyFile: "k", ClientCRLFile: "l"}:      "--tls-client-crl needs --tls-client-ca",
		{CertFile: "c", KeyFile: "k"}:                          "need an HTTP listener",
	} {
		err := applyTLSFlags(&gateway.Config{Listeners: []gateway.ListenerConfig{{Stdio: true}}}, flags)
		require.Error(t, err)
		assert.Contains(t, err.Error(), want)
	}
}

// TestE2EServeMTLSFromFlags: `serve --listen … --tls-*` serves MCP over
// TLS, refuses a client without a certificate in the handshake, and lets
// a client with one list tools.
func TestE2EServeMTLSFromFlags(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := selfSignedCA(t)
	issue := func(name string, usage x509.ExtKeyUsage, ip bool) (certFile, keyFile string, pair tls.Certificate) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		if ip {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
		require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
		require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
		pair, err = tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return certFile, keyFile, pair
	}
	serverCert, serverKey, _ := issue("gateway", x509.ExtKeyUsageServerAuth, true)
	_, _, client := issue("agent", x509.ExtKeyUsageClientAuth, false)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o600))

	cfgPath, key, value := writeConfig(t, demoServerYAML(t), "")
	cmd, url := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0",
		"--tls-cert", serverCert, "--tls-key", serverKey, "--tls-client-ca", caFile, "--tls-require-client-cert")
	require.Regexp(t, `^https://`, url)

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	connect := func(certs ...tls.Certificate) (*mcp.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
		return mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	}
	_, err := connect()
	require.Error(t, err, "no client certificate: refused in the handshake")
	cs, err := connect(client)
	require.NoError(t, err)
	list, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	assert.NotEmpty(t, list.Tools)
	require.NoError(t, cs.Close())

	// HTTP/2 is offered (ALPN) besides HTTP/1.1: a client that speaks it
	// gets it, mTLS included.
	h2 := &protoRecorder{next: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: h2}}, nil)
	require.NoError(t, err)
	list, err = cs.ListTools(ctx, nil)
	require.NoError(t, err)
	assert.NotEmpty(t, list.Tools)
	require.NoError(t, cs.Close())
	assert.Equal(t, []string{"HTTP/2.0"}, slices.Compact(h2.protos()))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Wait()
	testenv.RequireNoProcess(t, key, value)
}

func selfSignedCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "serve test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

// protoRecorder records the protocol of every response.
type protoRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if err == nil {
		p.mu.Lock()
		p.seen = append(p.seen, resp.Proto)
		p.mu.Unlock()
	}
	return resp, err
}

func (p *protoRecorder) protos() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}
