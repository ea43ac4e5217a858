package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
)

// verifiesClientCerts reports whether some HTTP listener asks clients for
// certificates, which then identify them.
func (c *Config) verifiesClientCerts() bool {
	for _, l := range c.Listeners {
		if l.TLS != nil && l.TLS.ClientCAFile != "" {
			return true
		}
	}
	return false
}

// TLSConfig is the crypto/tls configuration of a listener: its
// certificate, TLS 1.2 at least, and, with ClientCAFile, client
// certificates verified against those CAs in the handshake (required when
// RequireClientCert, else verified only if given).
func (t *ListenerTLSConfig) TLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		// The error of LoadX509KeyPair names files and PEM problems, never
		// key bytes.
		return nil, fmt.Errorf("tls: loading cert_file %s and key_file %s: %w", t.CertFile, t.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(t.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("tls: client_ca_file " + t.ClientCAFile + " holds no PEM certificate")
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if t.RequireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// httpErrorLog is the ErrorLog of the http.Server of the listener at addr.
// net/http reports a failed TLS handshake (no or untrusted client
// certificate, wrong protocol, a port scanner) only there, as text; it
// becomes a structured warning with the remote address and reason, counted
// in mcp_warden_tls_handshake_failures_total. Other server errors are
// logged as warnings.
func (g *Gateway) httpErrorLog(addr string) *log.Logger {
	return log.New(httpServerErrors{g: g, listener: addr}, "", 0)
}

type httpServerErrors struct {
	g        *Gateway
	listener string
}

func (e httpServerErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(msg, "http: TLS handshake error from "); ok {
		remote, reason, _ := strings.Cut(rest, ": ")
		e.g.metrics.tlsHandshakeFailures.WithLabelValues(e.listener).Inc()
		e.g.logger.Warn("TLS handshake failed", "listener", e.listener, "remote", remote, "reason", reason)
		return len(p), nil
	}
	e.g.logger.Warn("http server error", "listener", e.listener, "error", msg)
	return len(p), nil
}
