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
// starting with "alice_" are alice's only). Its operational log (the
// server's stderr among it) is returned.
func listerGateway(t *testing.T) (url string, oplog *testenv.Buffer) {
	t.Helper()
	p, err := rego.Load(filepath.Join(testenv.RepoRoot(t), "testdata", "policies", "per-principal"))
	require.NoError(t, err)
	key := func(id, token string) APIKeyConfig {
		sum := sha256.Sum256([]byte(token))
		return APIKeyConfig{ID: id, SHA256: hex.EncodeToString(sum[:])}
	}
	oplog = &testenv.Buffer{}
	g, _ := startGateway(t, &Config{Naming: NamingFirst,
		Servers: []ServerConfig{{Name: "lister", Command: testenv.BuildGo(t, "./testdata/servers/lister"),
			Tools: ToolFilter{Allow: []string{"*"}}, Prompts: ToolFilter{Allow: []string{"*"}}}},
		Auth: AuthConfig{Resource: testResource, APIKeys: []APIKeyConfig{key("alice", aliceToken), key("bob", bobToken)}}},
		WithPolicy(p), WithLogger(slog.New(slog.NewTextHandler(oplog, nil))))
	srv := httptest.NewServer(g.HTTPHandler(policy.Principal{}))
	t.Cleanup(srv.Close)
	return srv.URL, oplog
}

// listWatcher is a client counting the list_changed notifications it gets.
type listWatcher struct {
	session        *mcp.ClientSession
	tools, prompts atomic.Int32
}

func watchLists(t *testing.T, ctx context.Context, url, token, version string) *listWatcher {
	t.Helper()
	w := &listWatcher{}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "watcher"}, &mcp.ClientOptions{
		ToolListChangedHandler:   func(context.Context, *mcp.ToolListChangedRequest) { w.tools.Add(1) },
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) { w.prompts.Add(1) },
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
