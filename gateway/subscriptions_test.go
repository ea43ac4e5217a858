package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestE2EGoneSessionsEndUpstreamSubscriptions: downstream sessions that go
// away without unsubscribing — a 2025-11-25 session DELETEd, one timed
// out, an HTTP+SSE client disconnected, a stdio client gone, a 2026-07-28
// listen stream closed — give up their subscriptions: the upstream keeps
// its one subscription to a URI while any session of either era holds one,
// and is sent resources/unsubscribe when the last is gone. The upstream
// (the lister fixture) writes every subscribe and unsubscribe it receives
// to its stderr, which the gateway logs.
func TestE2EGoneSessionsEndUpstreamSubscriptions(t *testing.T) {
	defer func(d time.Duration) { sessionIdleTimeout = d }(sessionIdleTimeout)
	sessionIdleTimeout = 2 * time.Second
	l := startLister(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const watched = "test://watched"
	const wait, tick = 15 * time.Second, 10 * time.Millisecond
	// received says whether the upstream has received so many subscribes
	// and unsubscribes of the watched resource.
	received := func(subscribes, unsubscribes int) func() bool {
		return func() bool {
			log := l.oplog.String()
			u := strings.Count(log, `"unsubscribed `+watched+`"`)
			return strings.Count(log, `"subscribed `+watched+`"`) == subscribes && u == unsubscribes
		}
	}
	connect := func(tr mcp.Transport, version string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "subscriber"}, nil).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	httpClient := &http.Client{Transport: bearer{bobToken}}
	legacy := func() *mcp.ClientSession {
		return connect(&mcp.StreamableClientTransport{Endpoint: l.url + "/mcp", HTTPClient: httpClient}, legacyProtocolVersion)
	}
	subscribe := func(cs *mcp.ClientSession) {
		require.NoError(t, cs.Subscribe(ctx, &mcp.SubscribeParams{URI: watched}))
	}

	deleted := legacy()
	res, err := deleted.CallTool(ctx, &mcp.CallToolParams{Name: "add_resource", Arguments: map[string]any{"name": "watched"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Eventually(t, func() bool {
		rs, err := deleted.ListResources(ctx, nil)
		return err == nil && len(rs.Resources) > 0 && rs.Resources[0].URI == watched
	}, wait, tick, "the gateway re-listed the upstream's resources")
	subscribe(deleted)
	require.Eventually(t, received(1, 0), wait, tick, "the first subscriber subscribes the upstream")

	sse := connect(&mcp.SSEClientTransport{Endpoint: l.url + "/sse", HTTPClient: httpClient}, "")
	subscribe(sse)
	stdioClient, stdioServer := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- l.g.Serve(ctx, stdioServer, policy.Principal{ID: "bob"}) }()
	stdio := connect(stdioClient, legacyProtocolVersion)
	subscribe(stdio)
	modern := connect(&mcp.StreamableClientTransport{Endpoint: l.url + "/mcp", HTTPClient: httpClient}, modernProtocolVersion)
	subscribe(modern)
	subscribe(deleted) // again: still one subscription of this session
	time.Sleep(300 * time.Millisecond)
	require.True(t, received(1, 0)(), "later subscribers share the upstream's subscription")

	for _, gone := range []struct {
		what string
		end  func()
	}{
		{"a legacy session DELETEd", func() { require.NoError(t, deleted.Close()) }},
		{"an HTTP+SSE client disconnected", func() { require.NoError(t, sse.Close()) }},
		{"a stdio client gone", func() {
			require.NoError(t, stdio.Close())
			require.NoError(t, <-served)
		}},
	} {
		gone.end()
		time.Sleep(300 * time.Millisecond) // room for a wrong unsubscription
		assert.True(t, received(1, 0)(), "%s: the others keep the upstream subscribed", gone.what)
	}
	require.NoError(t, modern.Close()) // its listen stream ends
	require.Eventually(t, received(1, 1), wait, tick, "the last subscriber gone, the upstream is unsubscribed")

	// A session left idle until it times out gives its subscription up too.
	idle := legacy()
	subscribe(idle)
	require.Eventually(t, received(2, 1), wait, tick)
	require.Eventually(t, received(2, 2), wait, tick, "a timed-out session's subscription ends")
}

// TestE2ERestartedServerIsSubscribedAgain: a server restarted after its
// process died is subscribed again to the resources clients still hold,
// and a subscriber leaving afterwards unsubscribes the new process.
func TestE2ERestartedServerIsSubscribedAgain(t *testing.T) {
	l := startLister(t)
	sc := l.g.cfg.Servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const watched = "test://watched"
	const wait, tick = 30 * time.Second, 10 * time.Millisecond
	count := func(what string) int { return strings.Count(l.oplog.String(), `"`+what+` `+watched+`"`) }

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "subscriber"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: l.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{bobToken}}},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocolVersion})
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_resource", Arguments: map[string]any{"name": "watched"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Eventually(t, func() bool {
		rs, err := cs.ListResources(ctx, nil)
		return err == nil && len(rs.Resources) > 0 && rs.Resources[0].URI == watched
	}, wait, tick)
	require.NoError(t, cs.Subscribe(ctx, &mcp.SubscribeParams{URI: watched}))
	require.Eventually(t, func() bool { return count("subscribed") == 1 }, wait, tick)

	killServer(t, sc, sc.Command)
	require.Eventually(t, func() bool { return strings.Contains(l.oplog.String(), "server restarted") }, wait, tick)
	require.Eventually(t, func() bool { return count("subscribed") == 2 }, wait, tick,
		"the new process is subscribed to what the client still holds")
	assert.Zero(t, count("unsubscribed"))

	require.NoError(t, cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: watched}))
	require.Eventually(t, func() bool { return count("unsubscribed") == 1 }, wait, tick, "the new process is unsubscribed")
}
