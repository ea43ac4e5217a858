package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
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
	AuthMTLS   = authn.MethodMTLS
)

// wellKnownPRM is where RFC 9728 protected-resource metadata is served.
const wellKnownPRM = "/.well-known/oauth-protected-resource"

// authenticator guards the HTTP face: it verifies each request's bearer
// credential or takes the identity of its verified client certificate
// before the MCP handler sees the request, and serves the
// protected-resource metadata clients discover the authorization server
// from.
type authenticator struct {
	verifier    *authn.Verifier                    // nil: bearer credentials are not configured
	metadata    *oauthex.ProtectedResourceMetadata // nil without a resource URL
	metadataURL string
	// requiredScopes must all be among a JWT's scopes (else 403).
	requiredScopes []string
	logger         *slog.Logger
}

// principalKey holds the policy.Principal in auth.TokenInfo.Extra.
const principalKey = "mcp-warden/principal"

// newAuthenticator returns nil when cfg requires no authentication and
// no listener verifies client certificates (mtls).
func newAuthenticator(cfg AuthConfig, mtls bool, logger *slog.Logger) (*authenticator, error) {
	if !cfg.Enabled() {
		if !mtls {
			return nil, nil
		}
		return &authenticator{logger: logger}, nil
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
	a := &authenticator{verifier: authn.NewVerifier(keys, jwtOpts), requiredScopes: cfg.JWT.RequiredScopes, logger: logger}
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
		a.metadata.ScopesSupported = cfg.JWT.RequiredScopes
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

type verifiedKey struct{}

// protect identifies the request's client and hands h the request with
// the principal attached (through the go-sdk's TokenInfo, which reaches
// every MCP request as req.Extra.TokenInfo) and without the credential.
// Every refusal is a 401 whose reason goes to the log only.
//
// Precedence: a bearer credential, when bearer auth is configured and the
// request carries an Authorization header, names the principal (it is the
// more specific identity: a user or agent behind a machine's certificate),
// and a bad one is refused even over a verified certificate; otherwise a
// verified client certificate names it; otherwise, with bearer auth
// configured, the request is refused, and without it the request is made
// as the listener's configured principal (a listener whose client
// certificate is optional).
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
		id, reason := a.identify(r)
		if reason != "" {
			a.refuse(w, r, reason)
			return
		}
		if id == nil {
			withoutCredentials(h).ServeHTTP(w, r)
			return
		}
		if missing := a.missingScopes(id); len(missing) > 0 {
			a.forbid(w, r, id, missing)
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
		r = r.WithContext(context.WithValue(r.Context(), verifiedKey{}, ti))
		if id.Method == AuthMTLS {
			// The go-sdk middleware that attaches TokenInfo reads a bearer
			// header; the certificate stands for it. withoutCredentials
			// removes it again before the MCP layer.
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer client-certificate")
		}
		inner.ServeHTTP(w, r)
	})
}

// identify returns the request's verified identity, nil for "the
// configured principal", or why the request is refused (see protect for
// the precedence).
func (a *authenticator) identify(r *http.Request) (*authn.Identity, string) {
	if a.verifier != nil && len(r.Header.Values("Authorization")) > 0 {
		token, reason := bearerToken(r.Header)
		if reason != "" {
			return nil, reason
		}
		id, err := a.verifier.Verify(r.Context(), token)
		if err != nil {
			if f, ok := err.(*authn.Failure); ok {
				return nil, f.Reason
			}
			return nil, err.Error()
		}
		return id, ""
	}
	// VerifiedChains is set only when the listener verified the
	// certificate against its client CAs in the handshake.
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		id, err := authn.FromCertificate(r.TLS.VerifiedChains[0][0])
		if err != nil {
			return nil, err.(*authn.Failure).Reason
		}
		return id, ""
	}
	if a.verifier != nil {
		return nil, "no credentials"
	}
	return nil, ""
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

// missingScopes are the required scopes a JWT's identity lacks.
func (a *authenticator) missingScopes(id *authn.Identity) []string {
	if id.Method != AuthJWT {
		return nil
	}
	var missing []string
	for _, s := range a.requiredScopes {
		if !slices.Contains(id.Scopes, s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// forbid answers 403 insufficient_scope (RFC 6750 §3.1) to a valid token
// that lacks required scopes, naming every required scope so the client
// can ask for a token that carries them, and logs who lacked which.
func (a *authenticator) forbid(w http.ResponseWriter, r *http.Request, id *authn.Identity, missing []string) {
	a.logger.Warn("authorization refused: insufficient scope", "principal", id.ID, "auth_method", id.Method,
		"missing_scopes", strings.Join(missing, " "), "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
	challenge := fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, strings.Join(a.requiredScopes, " "))
	if a.metadataURL != "" {
		challenge += fmt.Sprintf(", resource_metadata=%q", a.metadataURL)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, "forbidden: insufficient scope", http.StatusForbidden)
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
