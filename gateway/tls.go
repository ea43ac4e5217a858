package gateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"
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
	caPEM, err := os.ReadFile(t.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: client_ca_file: %w", err)
	}
	cas, err := parseCertificates(caPEM)
	if err != nil || len(cas) == 0 {
		return nil, fmt.Errorf("tls: client_ca_file %s holds no PEM certificate (%v)", t.ClientCAFile, err)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if t.RequireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if t.ClientCRLFile != "" {
		crls := &revocationLists{path: t.ClientCRLFile, cas: cas}
		if _, err := crls.current(); err != nil {
			return nil, err
		}
		cfg.VerifyConnection = crls.verify
	}
	return cfg, nil
}

// parseCertificates reads every CERTIFICATE block of a PEM file.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, cert)
	}
}

// revocationLists checks client certificate chains against the CRLs of
// client_crl_file, reading the file again whenever its size or
// modification time changes.
type revocationLists struct {
	path string
	cas  []*x509.Certificate

	mu    sync.Mutex
	stamp string // size and modification time of the file read
	lists map[string]*crl
}

// crl is one CA's revocation list.
type crl struct {
	issuer     string // the CA's subject, for messages
	nextUpdate time.Time
	revoked    map[string]bool // serial numbers, as big.Int.String
}

// current returns the lists, read again if the file changed. A file that
// cannot be read or holds a list no CA of client_ca_file signed is an
// error: every client certificate is then refused until it is fixed.
func (r *revocationLists) current() (map[string]*crl, error) {
	st, err := os.Stat(r.path)
	if err != nil {
		return nil, fmt.Errorf("tls: client_crl_file: %w", err)
	}
	stamp := fmt.Sprint(st.Size(), st.ModTime().UnixNano())
	r.mu.Lock()
	defer r.mu.Unlock()
	if stamp == r.stamp {
		return r.lists, nil
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, fmt.Errorf("tls: client_crl_file: %w", err)
	}
	var ders [][]byte
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "X509 CRL" {
			ders = append(ders, block.Bytes)
		}
	}
	if len(ders) == 0 {
		ders = [][]byte{data} // DER
	}
	lists := map[string]*crl{}
	for i, der := range ders {
		l, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("tls: client_crl_file %s: list %d: %w", r.path, i+1, err)
		}
		signed := false
		for _, ca := range r.cas {
			if bytes.Equal(ca.RawSubject, l.RawIssuer) && l.CheckSignatureFrom(ca) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("tls: client_crl_file %s: the list of %s is not signed by a CA of client_ca_file", r.path, l.Issuer)
		}
		c := &crl{issuer: l.Issuer.String(), nextUpdate: l.NextUpdate, revoked: map[string]bool{}}
		for _, e := range l.RevokedCertificateEntries {
			c.revoked[e.SerialNumber.String()] = true
		}
		lists[string(l.RawIssuer)] = c
	}
	r.stamp, r.lists = stamp, lists
	return lists, nil
}

// verify is the listener's tls.Config.VerifyConnection: it refuses a
// client certificate chain in which a certificate (the root aside) is
// revoked, issued by a CA without a list, or checked against a list past
// its next update. A client without a certificate is not its concern.
func (r *revocationLists) verify(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 {
		return nil
	}
	lists, err := r.current()
	if err != nil {
		return err
	}
	now := time.Now()
	for _, chain := range cs.VerifiedChains {
		for _, cert := range chain[:len(chain)-1] {
			l := lists[string(cert.RawIssuer)]
			switch {
			case l == nil:
				return fmt.Errorf("client certificate %q: client_crl_file has no revocation list of its issuer %q", cert.Subject, cert.Issuer)
			case !l.nextUpdate.IsZero() && now.After(l.nextUpdate):
				return fmt.Errorf("client certificate %q: the revocation list of %q was due for renewal at %s; update client_crl_file", cert.Subject, l.issuer, l.nextUpdate.UTC().Format(time.RFC3339))
			case l.revoked[cert.SerialNumber.String()]:
				return fmt.Errorf("client certificate %q (serial %x) is revoked", cert.Subject, cert.SerialNumber)
			}
		}
	}
	return nil
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
