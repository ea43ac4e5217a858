package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcp-warden/mcp-warden/gateway/internal/authn"
	"github.com/mcp-warden/mcp-warden/policy"
)

// Auth methods, as they appear in input.principal.auth_method.
const (
	// AuthNone: no credentials were checked; the principal is the
	// configured one (stdio, unauthenticated HTTP) or the embedder's.
	AuthNone   = "none"
	AuthAPIKey = authn.MethodAPIKey
	AuthJWT    = authn.MethodJWT
)

// wellKnownPRM is where RFC 9728 protected-resource metadata is served.
const wellKnownPRM = "/.well-known/oauth-protected-resource"

// authenticator guards the HTTP face: it verifies each request's bearer
// credential before the MCP handler sees the request, and serves the
// protected-resource metadata clients discover the authorization server
// from.
type authenticator struct {
	verifier    *authn.Verifier
	metadata    *oauthex.ProtectedResourceMetadata // nil without a resource URL
	metadataURL string
	logger      *slog.Logger
}

// principalKey holds the policy.Principal in auth.TokenInfo.Extra.
const principalKey = "mcp-warden/principal"

// newAuthenticator returns nil when cfg requires no authentication.
func newAuthenticator(cfg AuthConfig, logger *slog.Logger) (*authenticator, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	keys := make([]authn.APIKey, len(cfg.APIKeys))
	for i, k := range cfg.APIKeys {
		sum, err := authn.ParseKeyHash(k.SHA256)
		if err != nil {
			return nil, fmt.Errorf("auth.api_keys[%d]: %w", i, err)
		}
		keys[i] = authn.APIKey{ID: k.ID, SHA256: sum, Claims: k.Claims}
	}
	var jwtOpts *authn.JWTOptions
	if j := cfg.JWT; j.Issuer != "" {
		jwtOpts = &authn.JWTOptions{Issuer: j.Issuer, Audience: j.Audience, SubjectClaim: j.SubjectClaim}
		if jwtOpts.Audience == "" {
			jwtOpts.Audience = cfg.Resource
		}
		if j.JWKSURL != "" {
			jwtOpts.Keys = authn.KeysFromURL(j.JWKSURL)
		} else {
			ks, err := authn.KeysFromFile(j.JWKSFile)
			if err != nil {
				return nil, fmt.Errorf("auth.jwt.jwks_file: %w", err)
			}
			jwtOpts.Keys = ks
		}
	}
	a := &authenticator{verifier: authn.NewVerifier(keys, jwtOpts), logger: logger}
	if cfg.Resource != "" {
		u, err := url.Parse(cfg.Resource)
		if err != nil {
			return nil, fmt.Errorf("auth.resource: %w", err)
		}
		a.metadataURL = u.Scheme + "://" + u.Host + wellKnownPRM + strings.TrimSuffix(u.Path, "/")
		a.metadata = &oauthex.ProtectedResourceMetadata{
			Resource:               cfg.Resource,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "mcp-warden",
		}
		if cfg.JWT.Issuer != "" {
			a.metadata.AuthorizationServers = []string{cfg.JWT.Issuer}
		}
	}
	return a, nil
}

// mount serves h at path on mux, behind authentication when a is not nil,
// together with the protected-resource metadata (at the root and at the
// resource's path, as RFC 9728 places it).
func (a *authenticator) mount(mux *http.ServeMux, path string, h http.Handler) {
	if a == nil {
		mux.Handle(path, h)
		return
	}
	mux.Handle(path, a.protect(h))
	if a.metadata != nil {
		prm := auth.ProtectedResourceMetadataHandler(a.metadata)
		mux.Handle(wellKnownPRM, prm)
		if u, err := url.Parse(a.metadataURL); err == nil && u.Path != wellKnownPRM {
			mux.Handle(u.Path, prm)
		}
	}
}

// protectIfEnabled is protect when HTTP clients must authenticate, and h
// itself when they need not.
func (a *authenticator) protectIfEnabled(h http.Handler) http.Handler {
	if a == nil {
		return h
	}
	return a.protect(h)
}

type verifiedKey struct{}

// protect verifies the request's credential and hands h the request with
// the principal attached (through the go-sdk's TokenInfo, which reaches
// every MCP request as req.Extra.TokenInfo) and without the credential.
// Every refusal is a 401 whose reason goes to the log only.
func (a *authenticator) protect(h http.Handler) http.Handler {
	inner := auth.RequireBearerToken(
		func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
			if ti, ok := r.Context().Value(verifiedKey{}).(*auth.TokenInfo); ok {
				return ti, nil
			}
			return nil, auth.ErrInvalidToken
		},
		&auth.RequireBearerTokenOptions{ResourceMetadataURL: a.metadataURL, AllowMissingExpiration: true},
	)(withoutCredentials(h))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, reason := bearerToken(r.Header)
		if reason != "" {
			a.refuse(w, r, reason)
			return
		}
		id, err := a.verifier.Verify(r.Context(), token)
		if err != nil {
			reason := err.Error()
			if f, ok := err.(*authn.Failure); ok {
				reason = f.Reason
			}
			a.refuse(w, r, reason)
			return
		}
		p := policy.Principal{ID: id.ID, Claims: id.Claims, AuthMethod: id.Method, Transport: TransportStreamableHTTP}
		ti := &auth.TokenInfo{
			// Sessions are bound to the user id: method-qualified, so an API
			// key id cannot take over a JWT subject's session.
			UserID:     id.Method + ":" + id.ID,
			Scopes:     id.Scopes,
			Expiration: id.Expiry,
			Extra:      map[string]any{principalKey: p},
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verifiedKey{}, ti)))
	})
}

// bearerToken reads the one Authorization: Bearer header, or says what is
// wrong with it.
func bearerToken(h http.Header) (token, problem string) {
	values := h.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", "no credentials"
	case len(values) > 1:
		return "", "more than one Authorization header"
	case len(values[0]) > authn.MaxTokenBytes+len("Bearer "):
		return "", fmt.Sprintf("token too large (over %d bytes)", authn.MaxTokenBytes)
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", "malformed Authorization header (want: Bearer <token>)"
	}
	return token, ""
}

// refuse answers 401 with a WWW-Authenticate naming the metadata, and logs
// why; the response says nothing about the gateway's tools.
func (a *authenticator) refuse(w http.ResponseWriter, r *http.Request, reason string) {
	a.logger.Warn("authentication refused", "reason", reason, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
	challenge := `Bearer error="invalid_token"`
	if a.metadataURL != "" {
		challenge += fmt.Sprintf(", resource_metadata=%q", a.metadataURL)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// withoutCredentials drops the client's credentials from the request
// before the MCP handler (and anything it calls) can see them: they are
// for the gateway alone and must never travel upstream.
func withoutCredentials(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.Header.Del("Authorization")
		r.Header.Del("Cookie")
		h.ServeHTTP(w, r)
	})
}
