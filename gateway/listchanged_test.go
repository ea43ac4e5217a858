package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

const (
	aliceToken = "alice-secret-token-0123456789"
	bobToken   = "bob-secret-token-0123456789"
)

// listerGateway serves the lister fixture over HTTP to the API keys of
// alice and bob, under the per-principal test policy (upstream names
// starting with "alice_", and resources test://alice_*, are alice's only).
// Its operational log (the server's stderr among it) is returned.
func listerGateway(t *testing.T) (url string, oplog *testenv.Buffer) {
	t.Helper()
	l := startLister(t)
	return l.url, l.oplog
}

// listerSetup is a gateway serving the lister fixture (see listerGateway).
type listerSetup struct {
	g     *Gateway
	url   string
	oplog *testenv.Buffer
	log   *decisionLog
}

func startLister(t *testing.T) listerSetup {
	t.Helper()
	p, err := rego.Load(filepath.Join(testenv.RepoRoot(t), "testdata", "policies", "per-principal"))
	require.NoError(t, err)
	key := func(id, token string) APIKeyConfig {
		sum := sha256.Sum256([]byte(token))
		return APIKeyConfig{ID: id, SHA256: hex.EncodeToString(sum[:])}
	}
	oplog := &testenv.Buffer{}
	g, log := startGateway(t, &Config{Naming: NamingFirst,
		Servers: []ServerConfig{{Name: "lister", Command: testenv.BuildGo(t, "./testdata/servers/lister"),
			Tools: ToolFilter{Allow: []string{"*"}}, Prompts: ToolFilter{Allow: []string{"*"}}, Resources: ToolFilter{Allow: []string{"*"}}}},
		Auth: AuthConfig{Resource: testResource, APIKeys: []APIKeyConfig{key("alice", aliceToken), key("bob", bobToken)}}},
		WithPolicy(p), WithLogger(slog.New(slog.NewTextHandler(oplog, nil))))
	srv := httptest.NewServer(g.HTTPHandler(policy.Principal{}))
	t.Cleanup(srv.Close)
	return listerSetup{g: g, url: srv.URL, oplog: oplog, log: log}
}

// listWatcher is a client counting the list_changed notifications it gets.
type listWatcher struct {
	session                   *mcp.ClientSession
	tools, prompts, resources atomic.Int32
}

func watchLists(t *testing.T, ctx context.Context, url, token, version string) *listWatcher {
	t.Helper()
	w := &listWatcher{}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "watcher"}, &mcp.ClientOptions{
		ToolListChangedHandler:   func(context.Context, *mcp.ToolListChangedRequest) { w.tools.Add(1) },
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) { w.prompts.Add(1) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			w.resources.Add(1)
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	w.session = cs
	return w
}

func (w *listWatcher) toolNames(t *testing.T, ctx context.Context) []string {
	res, err := w.session.ListTools(ctx, nil)
	require.NoError(t, err)
	return toolNames(res.Tools)
}

func (w *listWatcher) call(t *testing.T, ctx context.Context, tool, name string) {
	res, err := w.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"name": name}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(t, res))
}

// TestE2EListChangedOnlyToWhomTheChangeIsVisible: an upstream's list
// change is announced only to the clients whose principal's list it
// changed (a tool or prompt only alice may see changes nothing bob can
// see, and bob must not learn that something moved); a change both may
// see is announced to both, in both protocol eras over one endpoint.
func TestE2EListChangedOnlyToWhomTheChangeIsVisible(t *testing.T) {
	url, _ := listerGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice := watchLists(t, ctx, url, aliceToken, legacyProtocolVersion)
	bob := watchLists(t, ctx, url, bobToken, legacyProtocolVersion)
	bobAgain := watchLists(t, ctx, url, bobToken, legacyProtocolVersion) // a second session of the same principal

	count := func(n *atomic.Int32, want int32) func() bool { return func() bool { return n.Load() == want } }
	const wait, tick = 15 * time.Second, 10 * time.Millisecond

	// A tool only alice may see: only alice hears of it.
	alice.call(t, ctx, "add_tool", "alice_secret")
	require.Eventually(t, count(&alice.tools, 1), wait, tick, "alice is told her list changed")
	assert.Contains(t, alice.toolNames(t, ctx), "alice_secret")
	assert.NotContains(t, bob.toolNames(t, ctx), "alice_secret")

	// A tool both may see: both hear of it. Had bob been told of alice's
	// tool, that notification would have reached him before this one.
	bob.call(t, ctx, "add_tool", "shared")
	require.Eventually(t, count(&alice.tools, 2), wait, tick, "alice is told of the shared tool")
	require.Eventually(t, count(&bob.tools, 1), wait, tick, "bob is told of the shared tool")
	require.Eventually(t, count(&bobAgain.tools, 1), wait, tick, "every session of bob's is told")
	assert.Contains(t, bob.toolNames(t, ctx), "shared")

	// Removing alice's tool again is no news to bob either.
	alice.call(t, ctx, "remove_tool", "alice_secret")
	require.Eventually(t, count(&alice.tools, 3), wait, tick, "alice is told her tool went")
	assert.NotContains(t, alice.toolNames(t, ctx), "alice_secret")

	// Prompts are routed the same way.
	alice.call(t, ctx, "add_prompt", "alice_prompt")
	require.Eventually(t, count(&alice.prompts, 1), wait, tick, "alice is told her prompts changed")
	bob.call(t, ctx, "add_prompt", "shared_prompt")
	require.Eventually(t, count(&alice.prompts, 2), wait, tick)
	require.Eventually(t, count(&bob.prompts, 1), wait, tick, "bob is told of the shared prompt")

	time.Sleep(300 * time.Millisecond) // room for a wrong notification to arrive late
	assert.Equal(t, int32(1), bob.tools.Load(), "bob heard only of the shared tool")
	assert.Equal(t, int32(1), bobAgain.tools.Load())
	assert.Equal(t, int32(1), bob.prompts.Load(), "bob heard only of the shared prompt")

	t.Run("2026-07-28 subscriptions/listen", func(t *testing.T) {
		// A modern client hears of list changes through its
		// subscriptions/listen stream, routed the same way.
		modernAlice := watchLists(t, ctx, url, aliceToken, modernProtocolVersion)
		modernBob := watchLists(t, ctx, url, bobToken, modernProtocolVersion)
		// Let the listen streams open: a change both see reaches both.
		require.Eventually(t, func() bool {
			bob.call(t, ctx, "add_tool", "probe_"+time.Now().Format("150405.000000"))
			return modernAlice.tools.Load() > 0 && modernBob.tools.Load() > 0
		}, wait, 500*time.Millisecond)
		time.Sleep(300 * time.Millisecond) // the last probe's notifications arrive
		aliceBefore, bobBefore := modernAlice.tools.Load(), modernBob.tools.Load()
		alice.call(t, ctx, "add_tool", "alice_modern")
		require.Eventually(t, func() bool { return modernAlice.tools.Load() > aliceBefore }, wait, tick)
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, bobBefore, modernBob.tools.Load(), "the modern bob heard nothing of alice's tool")
		assert.False(t, slices.Contains(modernBob.toolNames(t, ctx), "alice_modern"))
	})
}

func (w *listWatcher) resourceURIs(t *testing.T, ctx context.Context) []string {
	res, err := w.session.ListResources(ctx, nil)
	require.NoError(t, err)
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	return uris
}

// TestE2EResourcesListChangedOnlyToWhomTheChangeIsVisible: an upstream
// adding or removing a resource only alice may see tells alice's sessions
// (a 2025-11-25 session and a 2026-07-28 subscriptions/listen stream) and
// not bob's; a resource both may see tells all of them. The visibility
// checks behind the routing are logged, noted as made for the upstream's
// announcement; the clients' own lists carry no such note.
func TestE2EResourcesListChangedOnlyToWhomTheChangeIsVisible(t *testing.T) {
	l := startLister(t)
	url := l.url
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const wait, tick = 15 * time.Second, 10 * time.Millisecond
	alice := watchLists(t, ctx, url, aliceToken, legacyProtocolVersion)
	bob := watchLists(t, ctx, url, bobToken, legacyProtocolVersion)
	modernAlice := watchLists(t, ctx, url, aliceToken, modernProtocolVersion)
	modernBob := watchLists(t, ctx, url, bobToken, modernProtocolVersion)
	everyone := []*listWatcher{alice, bob, modernAlice, modernBob}

	// Let the listen streams open: a resource both see reaches all.
	require.Eventually(t, func() bool {
		bob.call(t, ctx, "add_resource", "probe_"+time.Now().Format("150405.000000"))
		return modernAlice.resources.Load() > 0 && modernBob.resources.Load() > 0
	}, wait, 500*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // the last probe's notifications arrive
	counts := func() []int32 {
		var n []int32
		for _, w := range everyone {
			n = append(n, w.resources.Load())
		}
		return n
	}
	told := func(w *listWatcher, than int32) func() bool {
		return func() bool { return w.resources.Load() > than }
	}

	for _, step := range []string{"add_resource", "remove_resource"} {
		before := counts()
		alice.call(t, ctx, step, "alice_secret")
		require.Eventually(t, told(alice, before[0]), wait, tick, "%s: alice's session is told", step)
		require.Eventually(t, told(modernAlice, before[2]), wait, tick, "%s: alice's listen stream is told", step)
		time.Sleep(300 * time.Millisecond) // room for a wrong notification to arrive late
		assert.Equal(t, before[1], bob.resources.Load(), "%s: bob's session heard nothing of alice's resource", step)
		assert.Equal(t, before[3], modernBob.resources.Load(), "%s: bob's listen stream heard nothing", step)
		if step == "add_resource" {
			assert.Contains(t, alice.resourceURIs(t, ctx), "test://alice_secret")
			assert.NotContains(t, bob.resourceURIs(t, ctx), "test://alice_secret")
		}
	}

	before := counts()
	alice.call(t, ctx, "add_resource", "shared")
	for i, w := range everyone {
		require.Eventually(t, told(w, before[i]), wait, tick, "watcher %d is told of the shared resource", i)
	}
	assert.Contains(t, modernBob.resourceURIs(t, ctx), "test://shared")

	routing, clients := 0, 0
	for _, ev := range l.log.events(t) {
		in := ev["input"].(map[string]any)
		if in["action"] != string(policy.ActionResourcesList) {
			continue
		}
		custom, noted := ev["custom"].(map[string]any)
		if !noted {
			clients++
			continue
		}
		routing++
		assert.Equal(t, "list_changed_routing", custom["purpose"])
		assert.Equal(t, map[string]any{"server": "lister", "event": "list_changed", "lists": []any{"resources"}},
			custom["announcement"], "names the announcement it was made for")
	}
	assert.Positive(t, routing, "the routing checks are logged")
	assert.Equal(t, 3, clients, "each list a client asked for is logged without the note")
}

// TestE2EOwedMarkEndsWithItsNotification: an upstream's announcement
// whose re-list changes nothing in the gateway's own registry (so the SDK
// would send nothing) is still passed on to the principals who may see
// that server's tools: the gateway makes the SDK send it, so the mark that
// lets it through is used up and cannot let a later change only alice may
// see through to bob.
func TestE2EOwedMarkEndsWithItsNotification(t *testing.T) {
	l := startLister(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const wait, tick = 15 * time.Second, 10 * time.Millisecond
	alice := watchLists(t, ctx, l.url, aliceToken, legacyProtocolVersion)
	bob := watchLists(t, ctx, l.url, bobToken, legacyProtocolVersion)
	count := func(n *atomic.Int32, want int32) func() bool { return func() bool { return n.Load() == want } }

	// The announcement, as upstreamChanged passes it on once the re-list
	// is in: here the catalog is the very same, tool for tool.
	cat, err := l.g.currentCatalog()
	require.NoError(t, err)
	lister := cat.entries[0].upstream
	l.g.tellListsChanged(ctx, cat, cat, listAnnouncement{server: "lister", event: announcedListChanged, from: lister, tools: true})
	require.Eventually(t, count(&bob.tools, 1), wait, tick, "bob is told of the announcement")
	require.Eventually(t, count(&alice.tools, 1), wait, tick, "alice is told of the announcement")

	alice.call(t, ctx, "add_tool", "alice_secret")
	require.Eventually(t, count(&alice.tools, 2), wait, tick)
	time.Sleep(300 * time.Millisecond) // room for a wrong notification to arrive late
	assert.Equal(t, int32(1), bob.tools.Load(), "no mark left over lets alice's change through to bob")
}
