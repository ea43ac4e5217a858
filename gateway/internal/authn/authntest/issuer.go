// Package authntest is a token issuer for tests: real ECDSA keys, real
// signed JWTs, and its JWKS served over HTTP on loopback.
package authntest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// Issuer signs tokens with its current key and publishes its public keys.
type Issuer struct {
	t   *testing.T
	mu  sync.Mutex
	key jwk.Key // current private key
	pub jwk.Set // published public keys
	n   int
	// fetches counts JWKS requests.
	fetches int
}

// Fetches is how often the JWKS was fetched.
func (iss *Issuer) Fetches() int {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return iss.fetches
}

// New returns an Issuer with one key, kid "key-1".
func New(t *testing.T) *Issuer {
	iss := &Issuer{t: t}
	iss.Rotate()
	return iss
}

// NewKey returns a fresh private key with kid, not published.
func NewKey(t *testing.T, kid string) jwk.Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := jwk.Import(priv)
	if err != nil {
		t.Fatal(err)
	}
	_ = k.Set(jwk.KeyIDKey, kid)
	_ = k.Set(jwk.AlgorithmKey, jwa.ES256())
	return k
}

// Rotate replaces the signing key with a new one (kid "key-<n>") and
// publishes only the new public key.
func (iss *Issuer) Rotate() {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.n++
	iss.key = NewKey(iss.t, fmt.Sprintf("key-%d", iss.n))
	pub, err := iss.key.PublicKey()
	if err != nil {
		iss.t.Fatal(err)
	}
	iss.pub = jwk.NewSet()
	_ = iss.pub.AddKey(pub)
}

// KID is the current key id.
func (iss *Issuer) KID() string {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	kid, _ := iss.key.KeyID()
	return kid
}

// JWKS is the published key set.
func (iss *Issuer) JWKS() []byte {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	b, err := json.Marshal(iss.pub)
	if err != nil {
		iss.t.Fatal(err)
	}
	return b
}

// Sign returns a compact JWS of claims signed with the current key.
func (iss *Issuer) Sign(claims map[string]any) string {
	iss.mu.Lock()
	key := iss.key
	iss.mu.Unlock()
	return SignWith(iss.t, key, claims)
}

// SignWith signs claims with key (ES256).
func SignWith(t *testing.T, key jwk.Key, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	hdr := jws.NewHeaders()
	if kid, ok := key.KeyID(); ok && kid != "" {
		_ = hdr.Set(jws.KeyIDKey, kid)
	}
	_ = hdr.Set(jws.TypeKey, "JWT")
	b, err := jws.Sign(payload, jws.WithKey(jwa.ES256(), key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Serve publishes the JWKS at the returned URL until the test ends.
func (iss *Issuer) Serve() string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		iss.mu.Lock()
		iss.fetches++
		iss.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(iss.JWKS())
	}))
	iss.t.Cleanup(srv.Close)
	return srv.URL + "/jwks.json"
}
