package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// TestDecisionLogUploadAuthenticatesWithTheTokenFile: uploads carry
// "Authorization: Bearer <token>" read from bearer_token_file, and the
// token never appears in a record; a missing token file is a clear error.
func TestDecisionLogUploadAuthenticatesWithTheTokenFile(t *testing.T) {
	var mu sync.Mutex
	var auths []string
	var bodies int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		auths = append(auths, r.Header.Get("Authorization"))
		bodies++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "logs-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("log-service-token-42\n"), 0o600))
	upload := DecisionLogUploadConfig{URL: srv.URL, Interval: 10 * time.Millisecond, BearerTokenFile: tokenFile}
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}, DecisionLog: DecisionLogConfig{Upload: upload}},
		WithPolicy(rego.Demo()))
	_, err := g.CallTool(context.Background(), policy.Principal{ID: "alice", Claims: map[string]any{"note": "log-service-token-42"}},
		"demo__echo", map[string]any{"message": "hi"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return bodies > 0 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	for _, a := range auths {
		assert.Equal(t, "Bearer log-service-token-42", a)
	}
	mu.Unlock()
	assert.NotContains(t, log.String(), "log-service-token-42", "the upload token is redacted from events")
	assert.Contains(t, log.String(), "[REDACTED]")

	upload.BearerTokenFile = filepath.Join(t.TempDir(), "missing")
	_, err = New(&Config{Servers: []ServerConfig{demoServer(t)}, DecisionLog: DecisionLogConfig{Upload: upload}}, WithPolicy(rego.Demo()))
	require.ErrorContains(t, err, "decision_log.upload.bearer_token_file "+upload.BearerTokenFile)
}
