// Package authn verifies the credentials HTTP clients present: static API
// keys (kept only as sha256 hashes, compared in constant time) and JWTs
// (signature against a JWKS file, PEM public keys or a JWKS URL cached and
// refreshed on key rotation; issuer, audience, expiry and not-before).
//
// Every failure is a *Failure whose Reason is safe to log (it never holds
// the token) and which callers answer with 401.
package authn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// MaxTokenBytes bounds a presented token; larger ones are refused before
// any parsing.
const MaxTokenBytes = 8 << 10

// Auth methods, as they appear in input.principal.auth_method.
const (
	MethodAPIKey = "api_key"
	MethodJWT    = "jwt"
)

// Identity is who a verified credential names.
type Identity struct {
	ID     string
	Claims map[string]any
	Method string
	Scopes []string
	// Expiry is when the credential stops being valid; zero for API keys.
	Expiry time.Time
}

// Failure is a refused credential. Reason is for the log only.
type Failure struct{ Reason string }

func (f *Failure) Error() string { return "authentication failed: " + f.Reason }

func fail(format string, args ...any) *Failure { return &Failure{Reason: fmt.Sprintf(format, args...)} }

// APIKey is one static bearer token, known only by its sha256.
type APIKey struct {
	ID     string
	SHA256 [sha256.Size]byte
	Claims map[string]any
}

// ParseKeyHash reads a hex sha256 as written in the configuration.
func ParseKeyHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != sha256.Size {
		return h, errors.New("not a hex sha256 (64 hex digits)")
	}
	copy(h[:], b)
	return h, nil
}

// JWTOptions configures JWT verification.
type JWTOptions struct {
	Issuer   string
	Audience string
	// Keys is where the verification keys come from.
	Keys *KeySource
	// SubjectClaim names the claim holding the principal id ("sub").
	SubjectClaim string
}

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	keys []APIKey
	jwt  *JWTOptions
	now  func() time.Time
}

// NewVerifier returns a Verifier accepting keys and, when jwt is not nil,
// JWTs.
func NewVerifier(keys []APIKey, jwtOpts *JWTOptions) *Verifier {
	if jwtOpts != nil && jwtOpts.SubjectClaim == "" {
		jwtOpts.SubjectClaim = "sub"
	}
	return &Verifier{keys: keys, jwt: jwtOpts, now: time.Now}
}

// Verify checks token and returns its Identity, or a *Failure.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	if len(token) > MaxTokenBytes {
		return nil, fail("token too large (%d bytes, limit %d)", len(token), MaxTokenBytes)
	}
	if token == "" {
		return nil, fail("empty token")
	}
	if id := v.apiKey(token); id != nil {
		return id, nil
	}
	if v.jwt != nil && strings.Count(token, ".") == 2 {
		return v.verifyJWT(ctx, token)
	}
	if v.jwt != nil && len(v.keys) == 0 {
		return nil, fail("malformed token (not a JWS compact serialization)")
	}
	return nil, fail("unknown API key")
}

// apiKey compares the token's hash with every configured hash, in constant
// time and without stopping at a match, so timing reveals nothing.
func (v *Verifier) apiKey(token string) *Identity {
	sum := sha256.Sum256([]byte(token))
	var found *APIKey
	for i := range v.keys {
		if subtle.ConstantTimeCompare(sum[:], v.keys[i].SHA256[:]) == 1 {
			found = &v.keys[i]
		}
	}
	if found == nil {
		return nil
	}
	return &Identity{ID: found.ID, Claims: found.Claims, Method: MethodAPIKey}
}

func (v *Verifier) verifyJWT(ctx context.Context, token string) (*Identity, error) {
	msg, err := jws.Parse([]byte(token))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, fail("malformed token")
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	kid, _ := hdr.KeyID()
	set, err := v.jwt.Keys.keysFor(ctx, kid)
	if err != nil {
		return nil, err
	}
	opts := []jwt.ParseOption{
		jwt.WithKeySet(set, jws.WithInferAlgorithmFromKey(true), jws.WithRequireKid(kid != "")),
		jwt.WithValidate(true),
		jwt.WithIssuer(v.jwt.Issuer),
		jwt.WithAudience(v.jwt.Audience),
		jwt.WithRequiredClaim("exp"),
		jwt.WithClock(jwt.ClockFunc(v.now)),
	}
	tok, err := jwt.Parse([]byte(token), opts...)
	if err != nil {
		return nil, jwtFailure(err)
	}
	claims, err := payloadClaims(token)
	if err != nil {
		return nil, fail("malformed token payload")
	}
	sub, _ := claims[v.jwt.SubjectClaim].(string)
	if sub == "" {
		return nil, fail("token has no %q claim", v.jwt.SubjectClaim)
	}
	id := &Identity{ID: sub, Claims: claims, Method: MethodJWT}
	if exp, ok := tok.Expiration(); ok {
		id.Expiry = exp
	}
	id.Scopes = scopes(claims)
	return id, nil
}

// jwtFailure names why jwx refused a token.
func jwtFailure(err error) *Failure {
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		return fail("token expired")
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return fail("token not yet valid (nbf or iat in the future)")
	case errors.Is(err, jwt.InvalidAudienceError()):
		return fail("wrong audience")
	case errors.Is(err, jwt.InvalidIssuerError()):
		return fail("wrong issuer")
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return fail("token has no expiry (exp)")
	case errors.Is(err, jws.VerifyError()), errors.Is(err, jws.VerificationError()):
		return fail("bad signature")
	case errors.Is(err, jwt.ValidateError()):
		return fail("invalid claims")
	}
	return fail("invalid token")
}

// payloadClaims decodes the (already verified) payload of a compact JWS,
// keeping numbers as written.
func payloadClaims(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return nil, err
	}
	return claims, nil
}

// scopes are a token's OAuth scopes: its "scope" claim (RFC 8693: a
// space-separated string), else "scp" (a string or an array of strings, as
// some issuers write it).
func scopes(claims map[string]any) []string {
	if s, ok := claims["scope"].(string); ok {
		return strings.Fields(s)
	}
	switch scp := claims["scp"].(type) {
	case string:
		return strings.Fields(scp)
	case []any:
		var out []string
		for _, v := range scp {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
