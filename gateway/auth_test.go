package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/gateway/internal/authn"
	"github.com/mcp-warden/mcp-warden/gateway/internal/authn/authntest"
	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

const (
	testResource = "https://gw.example/mcp"
	testIssuer   = "https://idp.example"
	ciToken      = "ci-secret-token-0123456789"
)

func authConfig(jwksURL string) AuthConfig {
	sum := sha256.Sum256([]byte(ciToken))
	return AuthConfig{
		Resource: testResource,
		APIKeys:  []APIKeyConfig{{ID: "ci-bot", SHA256: hex.EncodeToString(sum[:]), Claims: map[string]any{"team": "ci"}}},
		JWT:      JWTConfig{Issuer: testIssuer, JWKSURL: jwksURL},
	}
}

// serveAuthenticated serves g's HTTP face exactly as Run mounts it.
func serveAuthenticated(t *testing.T, g *Gateway) string {
	srv := httptest.NewServer(g.HTTPHandler(policy.Principal{ID: g.cfg.Principal.ID}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// bearer adds a fixed Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connectWith(t *testing.T, ctx context.Context, url, token string) *mcp.ClientSession {
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

func jwtClaims(overrides map[string]any) map[string]any {
	c := map[string]any{"iss": testIssuer, "aud": testResource, "sub": "bob", "exp": time.Now().Add(time.Hour).Unix(), "scope": "tools"}
	for k, v := range overrides {
		c[k] = v
	}
	return c
}

func TestAuthenticatedPrincipalsReachPolicyAndLog(t *testing.T) {
	iss := authntest.New(t)
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Auth: authConfig(iss.Serve())}, WithPolicy(rego.Demo()))
	url := serveAuthenticated(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for token, want := range map[string]map[string]any{
		ciToken:                  {"id": "ci-bot", "auth_method": "api_key", "claims": map[string]any{"team": "ci"}, "transport": "streamable-http"},
		iss.Sign(jwtClaims(nil)): {"id": "bob", "auth_method": "jwt", "transport": "streamable-http"},
	} {
		before := len(log.events(t))
		cs := connectWith(t, ctx, url, token)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"message": "hi"}})
		require.NoError(t, err)
		assert.Equal(t, "hi", text(t, res))
		evs := log.events(t)[before:]
		require.Len(t, evs, 1)
		got := evs[0]["input"].(map[string]any)["principal"].(map[string]any)
		if want["auth_method"] == "jwt" {
			claims := got["claims"].(map[string]any)
			assert.Equal(t, "tools", claims["scope"], "a JWT's claims are the principal's claims")
			assert.Equal(t, testIssuer, claims["iss"])
			delete(got, "claims")
		}
		assert.Equal(t, want, got)
		assert.NotContains(t, log.String(), token, "tokens never reach the decision log")
	}
}

func TestBadCredentialsAre401WithTheReasonLogged(t *testing.T) {
	iss := authntest.New(t)
	var oplog testenv.Buffer
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Auth: authConfig(iss.Serve())},
		WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	url := serveAuthenticated(t, g)
	listBody := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

	cases := map[string]struct {
		header []string // Authorization values
		reason string
	}{
		"no credentials":  {nil, "no credentials"},
		"basic scheme":    {[]string{"Basic Y2k6eA=="}, "malformed Authorization header"},
		"bearer only":     {[]string{"Bearer"}, "malformed Authorization header"},
		"two headers":     {[]string{"Bearer " + ciToken, "Bearer " + ciToken}, "more than one Authorization header"},
		"too large":       {[]string{"Bearer " + strings.Repeat("a", authn.MaxTokenBytes+10)}, "token too large"},
		"unknown api key": {[]string{"Bearer not-a-key"}, "unknown API key"},
		"wrong signature": {[]string{"Bearer " + authntest.SignWith(t, authntest.NewKey(t, iss.KID()), jwtClaims(nil))}, "bad signature"},
		"expired":         {[]string{"Bearer " + iss.Sign(jwtClaims(map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}))}, "token expired"},
		"not yet valid":   {[]string{"Bearer " + iss.Sign(jwtClaims(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()}))}, "not yet valid"},
		"wrong audience":  {[]string{"Bearer " + iss.Sign(jwtClaims(map[string]any{"aud": "https://elsewhere.example/mcp"}))}, "wrong audience"},
		"wrong issuer":    {[]string{"Bearer " + iss.Sign(jwtClaims(map[string]any{"iss": "https://evil.example"}))}, "wrong issuer"},
		"unknown key id":  {[]string{"Bearer " + authntest.SignWith(t, authntest.NewKey(t, "rogue"), jwtClaims(nil))}, "unknown key id"},
		"malformed jwt":   {[]string{"Bearer x.y.z"}, "malformed token"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(listBody))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			logged := len(oplog.String())
			for _, v := range tc.header {
				req.Header.Add("Authorization", v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
			assert.Equal(t, `Bearer error="invalid_token", resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"`,
				resp.Header.Get("WWW-Authenticate"))
			assert.NotContains(t, string(body), "demo", "a refusal says nothing about tools")
			assert.Contains(t, oplog.String()[logged:], tc.reason, "this refusal's reason is logged")
		})
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	iss := authntest.New(t)
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Auth: authConfig(iss.Serve())}, WithPolicy(rego.Demo()))
	url := serveAuthenticated(t, g)
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, err := http.Get(url + path)
		require.NoError(t, err)
		var prm map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&prm))
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, testResource, prm["resource"])
		assert.Equal(t, []any{testIssuer}, prm["authorization_servers"])
		assert.Equal(t, []any{"header"}, prm["bearer_methods_supported"])
	}
}

// TestE2EClientTokenNeverReachesTheUpstream calls server-everything's
// get-env and echo through an authenticated HTTP face: neither the
// server's environment nor anything it can observe holds the client's
// token.
func TestE2EClientTokenNeverReachesTheUpstream(t *testing.T) {
	iss := authntest.New(t)
	cmd, args := testenv.NodeCommand(t, "mcp-server-everything")
	g, log := startGateway(t, &Config{
		Servers: []ServerConfig{{Name: "everything", Command: cmd, Args: append(args, "stdio"),
			Tools: ToolFilter{Allow: []string{"get-env", "echo"}}}},
		Auth: authConfig(iss.Serve()),
	})
	url := serveAuthenticated(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jwt := iss.Sign(jwtClaims(nil))
	for _, token := range []string{ciToken, jwt} {
		cs := connectWith(t, ctx, url, token)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__get-env"})
		require.NoError(t, err)
		env := text(t, res)
		assert.Contains(t, env, "PATH")
		assert.NotContains(t, env, token)
		assert.NotContains(t, env, "Bearer")
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "ping"}})
		require.NoError(t, err)
		assert.NotContains(t, text(t, res), token)
		assert.NotContains(t, log.String(), token)
	}
}

// TestMissingScopeIs403InsufficientScope: with required scopes configured,
// a valid JWT lacking one is answered 403 with an RFC 6750
// insufficient_scope challenge naming the scopes, and the refusal is
// logged; a JWT carrying them (in "scope" or "scp") and an API key pass.
func TestMissingScopeIs403InsufficientScope(t *testing.T) {
	iss := authntest.New(t)
	var oplog testenv.Buffer
	cfg := authConfig(iss.Serve())
	cfg.JWT.RequiredScopes = []string{"mcp:tools", "mcp:read"}
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, Auth: cfg},
		WithPolicy(rego.Demo()), WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	url := serveAuthenticated(t, g)
	post := func(token string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	resp := post(iss.Sign(jwtClaims(map[string]any{"scope": "mcp:tools"})))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, `Bearer error="insufficient_scope", scope="mcp:tools mcp:read", resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"`,
		resp.Header.Get("WWW-Authenticate"))
	assert.Contains(t, oplog.String(), "insufficient scope")
	assert.Contains(t, oplog.String(), "missing_scopes=mcp:read")

	assert.Equal(t, http.StatusOK, post(iss.Sign(jwtClaims(map[string]any{"scope": "mcp:read mcp:tools other"}))).StatusCode)
	assert.Equal(t, http.StatusOK, post(iss.Sign(jwtClaims(map[string]any{"scope": nil, "scp": []any{"mcp:read", "mcp:tools"}}))).StatusCode)
	assert.Equal(t, http.StatusOK, post(ciToken).StatusCode, "API keys carry no scopes and are not checked")

	prm, err := http.Get(url + "/.well-known/oauth-protected-resource")
	require.NoError(t, err)
	defer prm.Body.Close()
	var meta map[string]any
	require.NoError(t, json.NewDecoder(prm.Body).Decode(&meta))
	assert.Equal(t, []any{"mcp:tools", "mcp:read"}, meta["scopes_supported"])
}
