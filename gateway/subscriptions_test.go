package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
)

// TestE2EResourceSubscriptionsBothEras: a 2026-07-28 client subscribing
// through subscriptions/listen and a 2025-11-25 client through
// resources/subscribe both get the upstream's updates of a resource policy
// lets them read; the subscription is decided for the authenticated
// principal in both eras; one client unsubscribing does not end the
// other's updates; a resource policy hides cannot be subscribed to.
func TestE2EResourceSubscriptionsBothEras(t *testing.T) {
	const watched = "test://watched-resource" // updated by the server every 3 s
	sc := everythingStdio(t)
	sc.Resources.Allow = append(sc.Resources.Allow, watched)
	sum := sha256.Sum256([]byte(ciToken))
	g, log := startGateway(t, &Config{Naming: NamingFirst, Servers: []ServerConfig{sc},
		Auth: AuthConfig{Resource: testResource, APIKeys: []APIKeyConfig{{ID: "ci-bot", SHA256: hex.EncodeToString(sum[:])}}}})
	srv := httptest.NewServer(g.HTTPHandler(policy.Principal{}))
	t.Cleanup(srv.Close) // after the clients' (open listen requests hold it)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	connect := func(version string, updates *atomic.Int32) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "subscriber"}, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
				if req.Params.URI == watched {
					updates.Add(1)
				}
			},
		}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp",
			HTTPClient: &http.Client{Transport: bearer{ciToken}}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	var modernUpdates, legacyUpdates atomic.Int32
	modern := connect(modernProtocolVersion, &modernUpdates)
	legacy := connect(legacyProtocolVersion, &legacyUpdates)
	before := len(log.events(t))
	require.NoError(t, modern.Subscribe(ctx, &mcp.SubscribeParams{URI: watched}))
	require.NoError(t, legacy.Subscribe(ctx, &mcp.SubscribeParams{URI: watched}))
	updated := func(n *atomic.Int32, more int32) func() bool {
		from := n.Load()
		return func() bool { return n.Load() >= from+more }
	}
	assert.Eventually(t, updated(&modernUpdates, 1), 10*time.Second, 20*time.Millisecond, "the 2026-07-28 subscriber is updated")
	assert.Eventually(t, updated(&legacyUpdates, 1), 10*time.Second, 20*time.Millisecond, "the 2025-11-25 subscriber is updated")

	subscribes := 0
	for _, ev := range log.events(t)[before:] {
		in := ev["input"].(map[string]any)
		if in["action"] != string(policy.ActionResourcesRead) {
			continue
		}
		subscribes++
		assert.Equal(t, "ci-bot", in["principal"].(map[string]any)["id"], "decided for the authenticated principal")
	}
	assert.Equal(t, 2, subscribes, "each subscription decided and logged")

	require.NoError(t, legacy.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: watched}))
	assert.Eventually(t, updated(&modernUpdates, 1), 10*time.Second, 20*time.Millisecond,
		"the other client's unsubscription did not end the upstream subscription")

	// The SDK client does not surface a refused listen; the wire does.
	body := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["test://not-allowed"]},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	resp := post(t, srv.URL+"/mcp", body, map[string]string{"Authorization": "Bearer " + ciToken,
		"MCP-Protocol-Version": modernProtocolVersion, "Mcp-Method": "subscriptions/listen"})
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(answer), `"error"`, "refused")
	assert.Contains(t, string(answer), "not found", "a hidden resource is answered as a missing one")
}
