package authn

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/url"
)

// MethodMTLS is the auth method of a client identified by a verified TLS
// client certificate.
const MethodMTLS = "mtls"

// FromCertificate is the Identity a verified client certificate names: its
// first URI SAN (e.g. a SPIFFE id), else its first DNS SAN, else its
// subject common name. The claims describe the certificate (subject,
// issuer, serial, SANs, sha256 fingerprint) and hold nothing secret: no
// key material, only what any peer of the handshake sees.
//
// cert must already be verified against the configured CAs (crypto/tls
// does it in the handshake); FromCertificate only reads it.
func FromCertificate(cert *x509.Certificate) (*Identity, error) {
	var id string
	switch {
	case len(cert.URIs) > 0:
		id = cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		id = cert.DNSNames[0]
	default:
		id = cert.Subject.CommonName
	}
	if id == "" {
		return nil, fail("client certificate (serial %s, issuer %q) names no identity: no URI or DNS SAN and no subject CN", cert.SerialNumber.Text(16), cert.Issuer.String())
	}
	fp := sha256.Sum256(cert.Raw)
	claims := map[string]any{
		"subject":            cert.Subject.String(),
		"issuer":             cert.Issuer.String(),
		"serial":             cert.SerialNumber.Text(16),
		"fingerprint_sha256": hex.EncodeToString(fp[:]),
		"not_after":          cert.NotAfter.UTC().Format("2006-01-02T15:04:05Z"),
	}
	if cn := cert.Subject.CommonName; cn != "" {
		claims["common_name"] = cn
	}
	if len(cert.URIs) > 0 {
		claims["uris"] = anySlice(cert.URIs, (*url.URL).String)
	}
	if len(cert.DNSNames) > 0 {
		claims["dns_names"] = anySlice(cert.DNSNames, func(s string) string { return s })
	}
	if len(cert.EmailAddresses) > 0 {
		claims["email_addresses"] = anySlice(cert.EmailAddresses, func(s string) string { return s })
	}
	return &Identity{ID: id, Claims: claims, Method: MethodMTLS, Expiry: cert.NotAfter}, nil
}

// anySlice converts to []any, the form JSON-decoded claims have, so policy
// sees the same shapes whatever the auth method.
func anySlice[T any](xs []T, f func(T) string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
