package authn

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// KeySource holds JWT verification keys: a fixed set (JWKS or PEM file),
// or a JWKS URL fetched on first use, refreshed after MaxAge, and refetched
// early when a token names a key id the cached set lacks (key rotation),
// at most once per MinRefresh.
type KeySource struct {
	url        string
	client     *http.Client
	MaxAge     time.Duration
	MinRefresh time.Duration

	mu        sync.Mutex
	set       jwk.Set
	fetched   time.Time
	attempted time.Time
}

// maxJWKSBytes bounds a fetched key set.
const maxJWKSBytes = 1 << 20

// KeysFromFile reads a JWKS document or PEM-encoded public keys.
func KeysFromFile(path string) (*KeySource, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set, err := parseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &KeySource{set: set}, nil
}

func parseKeys(b []byte) (jwk.Set, error) {
	var opts []jwk.ParseOption
	if bytes.Contains(b, []byte("-----BEGIN")) {
		opts = append(opts, jwk.WithPEM(true))
	}
	set, err := jwk.Parse(b, opts...)
	if err != nil {
		return nil, err
	}
	if set.Len() == 0 {
		return nil, fmt.Errorf("no keys")
	}
	// Only public keys verify. A private key in the file means the file is
	// misplaced, and shared (oct) secrets would make the file a credential.
	for i := range set.Len() {
		k, _ := set.Key(i)
		switch k.(type) {
		case jwk.RSAPrivateKey, jwk.ECDSAPrivateKey, jwk.OKPPrivateKey:
			return nil, fmt.Errorf("key %d is a private key; give the public key only", i)
		case jwk.RSAPublicKey, jwk.ECDSAPublicKey, jwk.OKPPublicKey:
		default:
			return nil, fmt.Errorf("key %d is not an RSA, EC or OKP public key", i)
		}
	}
	return set, nil
}

// KeysFromURL fetches a JWKS from url when first needed.
// It connects directly: proxy environment variables are not used, as for
// every outbound connection the gateway makes without configuration.
func KeysFromURL(url string) *KeySource {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return &KeySource{url: url, client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		MaxAge: 10 * time.Minute, MinRefresh: 30 * time.Second}
}

// keysFor returns the set to verify a token whose header names kid.
func (s *KeySource) keysFor(ctx context.Context, kid string) (jwk.Set, error) {
	if s.url == "" {
		if _, ok := s.set.LookupKeyID(kid); kid != "" && !ok {
			return nil, fail("unknown key id %q", kid)
		}
		return s.set, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	stale := s.set == nil || now.Sub(s.fetched) > s.MaxAge
	missing := false
	if s.set != nil && kid != "" {
		_, ok := s.set.LookupKeyID(kid)
		missing = !ok
	}
	if (stale || missing) && (s.set == nil || now.Sub(s.attempted) >= s.MinRefresh || stale) {
		s.attempted = now
		set, err := s.fetch(ctx)
		switch {
		case err == nil:
			s.set, s.fetched = set, now
		case s.set == nil:
			return nil, fail("key set unavailable: %v", err)
		}
		// A failed refresh keeps the cached keys.
	}
	if _, ok := s.set.LookupKeyID(kid); kid != "" && !ok {
		return nil, fail("unknown key id %q", kid)
	}
	return s.set, nil
}

func (s *KeySource) fetch(ctx context.Context) (jwk.Set, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("GET %s: key set larger than %d bytes", s.url, maxJWKSBytes)
	}
	return parseKeys(b)
}
