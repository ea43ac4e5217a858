package authn

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/gateway/internal/authn/authntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	issuer   = "https://idp.example"
	audience = "https://gw.example/mcp"
)

func claims(overrides map[string]any) map[string]any {
	c := map[string]any{"iss": issuer, "aud": audience, "sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "team": "platform"}
	for k, v := range overrides {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func reason(t *testing.T, err error) string {
	t.Helper()
	var f *Failure
	require.ErrorAs(t, err, &f)
	return f.Reason
}

func TestAPIKeys(t *testing.T) {
	v := NewVerifier([]APIKey{
		{ID: "ci", SHA256: sha256.Sum256([]byte("tok-ci")), Claims: map[string]any{"team": "ci"}},
		{ID: "ops", SHA256: sha256.Sum256([]byte("tok-ops"))},
	}, nil)
	id, err := v.Verify(context.Background(), "tok-ops")
	require.NoError(t, err)
	assert.Equal(t, &Identity{ID: "ops", Method: MethodAPIKey}, id)
	id, err = v.Verify(context.Background(), "tok-ci")
	require.NoError(t, err)
	assert.Equal(t, "platform", claims(nil)["team"])
	assert.Equal(t, map[string]any{"team": "ci"}, id.Claims)

	_, err = v.Verify(context.Background(), "tok-cj")
	assert.Equal(t, "unknown API key", reason(t, err))
	_, err = v.Verify(context.Background(), strings.Repeat("x", MaxTokenBytes+1))
	assert.Contains(t, reason(t, err), "too large")

	h, err := ParseKeyHash("  " + strings.Repeat("ab", 32) + "\n")
	require.NoError(t, err)
	assert.Equal(t, byte(0xab), h[0])
	_, err = ParseKeyHash("tok-ci")
	assert.Error(t, err)
}

func TestJWTFailureReasons(t *testing.T) {
	iss := authntest.New(t)
	ks := KeysFromURL(iss.Serve())
	v := NewVerifier(nil, &JWTOptions{Issuer: issuer, Audience: audience, Keys: ks})
	ctx := context.Background()

	id, err := v.Verify(ctx, iss.Sign(claims(nil)))
	require.NoError(t, err)
	assert.Equal(t, "alice", id.ID)
	assert.Equal(t, MethodJWT, id.Method)
	assert.Equal(t, "platform", id.Claims["team"])
	assert.WithinDuration(t, time.Now().Add(time.Hour), id.Expiry, time.Minute)

	stranger := authntest.NewKey(t, iss.KID()) // same kid, other key
	for name, tc := range map[string]struct {
		token, reason string
	}{
		"expired":        {iss.Sign(claims(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})), "token expired"},
		"not yet valid":  {iss.Sign(claims(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "not yet valid"},
		"wrong audience": {iss.Sign(claims(map[string]any{"aud": "https://other.example"})), "wrong audience"},
		"wrong issuer":   {iss.Sign(claims(map[string]any{"iss": "https://evil.example"})), "wrong issuer"},
		"no expiry":      {iss.Sign(claims(map[string]any{"exp": nil})), "no expiry"},
		"no subject":     {iss.Sign(claims(map[string]any{"sub": nil})), `no "sub" claim`},
		"bad signature":  {authntest.SignWith(t, stranger, claims(nil)), "bad signature"},
		"unknown kid":    {authntest.SignWith(t, authntest.NewKey(t, "key-99"), claims(nil)), `unknown key id "key-99"`},
		"malformed":      {"a.b.c", "malformed token"},
		"not a jwt":      {"just-a-string", "malformed token"},
		"alg none": {"eyJhbGciOiJub25lIiwia2lkIjoia2V5LTEifQ." + strings.Split(iss.Sign(claims(nil)), ".")[1] + ".",
			"bad signature"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.Verify(ctx, tc.token)
			assert.Contains(t, reason(t, err), tc.reason)
			assert.NotContains(t, err.Error(), tc.token, "reasons never carry the token")
		})
	}
}

func TestJWKSURLRotation(t *testing.T) {
	iss := authntest.New(t)
	ks := KeysFromURL(iss.Serve())
	ks.MinRefresh = 0
	v := NewVerifier(nil, &JWTOptions{Issuer: issuer, Audience: audience, Keys: ks})
	ctx := context.Background()
	for range 3 {
		_, err := v.Verify(ctx, iss.Sign(claims(nil)))
		require.NoError(t, err)
	}
	assert.Equal(t, 1, iss.Fetches(), "the key set is cached")

	old := iss.Sign(claims(nil))
	iss.Rotate()
	_, err := v.Verify(ctx, iss.Sign(claims(nil)))
	require.NoError(t, err, "a token with the new key id refetches the set")
	assert.Equal(t, 2, iss.Fetches())
	_, err = v.Verify(ctx, old)
	assert.Contains(t, reason(t, err), "unknown key id", "the retired key no longer verifies")

	// Unknown key ids refetch at most once per MinRefresh.
	ks.MinRefresh = time.Hour
	for range 5 {
		_, err = v.Verify(ctx, authntest.SignWith(t, authntest.NewKey(t, "forged"), claims(nil)))
		assert.Contains(t, reason(t, err), "unknown key id")
	}
	assert.Equal(t, 3, iss.Fetches())
}

func TestJWKSUnavailable(t *testing.T) {
	iss := authntest.New(t)
	v := NewVerifier(nil, &JWTOptions{Issuer: issuer, Audience: audience, Keys: KeysFromURL("http://127.0.0.1:1/jwks.json")})
	_, err := v.Verify(context.Background(), iss.Sign(claims(nil)))
	assert.Contains(t, reason(t, err), "key set unavailable")
}

func TestKeysFromFile(t *testing.T) {
	iss := authntest.New(t)
	dir := t.TempDir()
	jwksPath := filepath.Join(dir, "jwks.json")
	require.NoError(t, os.WriteFile(jwksPath, iss.JWKS(), 0o600))

	// The same public key as PEM: tokens without a kid verify against it.
	key := authntest.NewKey(t, "")
	var raw any
	pub, err := key.PublicKey()
	require.NoError(t, err)
	require.NoError(t, jwk.Export(pub, &raw))
	der, err := x509.MarshalPKIXPublicKey(raw)
	require.NoError(t, err)
	pemPath := filepath.Join(dir, "keys.pem")
	require.NoError(t, os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))

	for path, token := range map[string]string{jwksPath: iss.Sign(claims(nil)), pemPath: authntest.SignWith(t, key, claims(nil))} {
		ks, err := KeysFromFile(path)
		require.NoError(t, err)
		_, err = NewVerifier(nil, &JWTOptions{Issuer: issuer, Audience: audience, Keys: ks}).Verify(context.Background(), token)
		assert.NoError(t, err, path)
	}

	privPath := filepath.Join(dir, "private.json")
	b := jwk.NewSet()
	require.NoError(t, b.AddKey(key))
	enc, err := jwkJSON(b)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(privPath, enc, 0o600))
	_, err = KeysFromFile(privPath)
	assert.ErrorContains(t, err, "is a private key")
}

func jwkJSON(s jwk.Set) ([]byte, error) { return json.Marshal(s) }

// The JWKS is fetched directly: proxy environment variables are not used
// unless configured, as for every outbound connection of the gateway.
func TestJWKSFetchUsesNoEnvironmentProxy(t *testing.T) {
	tr, ok := KeysFromURL("https://issuer.example/jwks.json").client.Transport.(*http.Transport)
	require.True(t, ok)
	assert.Nil(t, tr.Proxy)
}
