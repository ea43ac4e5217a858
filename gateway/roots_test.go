package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2ERootsRequestsReachTheCallingClient: a server's roots/list during
// a call is answered with the roots of the client that made the call, and
// never with another client's; a client that declared no roots capability
// makes it method-not-found; outside any client's call the gateway answers
// for itself, with no roots.
func TestE2ERootsRequestsReachTheCallingClient(t *testing.T) {
	url, oplog := listerGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(token string, caps *mcp.ClientCapabilities, roots ...string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "rooted"}, &mcp.ClientOptions{Capabilities: caps})
		for _, r := range roots {
			client.AddRoots(&mcp.Root{URI: r})
		}
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
			HTTPClient: &http.Client{Transport: bearer{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocolVersion})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	roots := func(cs *mcp.ClientSession) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "roots", Arguments: map[string]any{}})
		require.NoError(t, err)
		return text(t, res)
	}
	alice := connect(aliceToken, nil, "file:///home/alice", "file:///srv/alice")
	bob := connect(bobToken, nil, "file:///home/bob")
	rootless := connect(bobToken, &mcp.ClientCapabilities{})

	assert.Equal(t, "file:///home/alice\nfile:///srv/alice", roots(alice))
	assert.Equal(t, "file:///home/bob", roots(bob))
	got := roots(rootless)
	assert.True(t, strings.HasPrefix(got, "error: "), "a client without roots gives the server an error: %s", got)
	assert.Contains(t, got, "method not found", "-32601, as the spec prescribes")
	assert.NotContains(t, got, "file://")

	// After the call has been answered, no client's call is in flight:
	// the gateway answers, with no roots — not the last caller's.
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "roots_later", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, "asking later", text(t, res))
	waitLine(t, oplog, "roots later: ")
}

// TestE2EClientRootsChangesReachTheServersThatServedIt: a legacy client's
// notifications/roots/list_changed goes to the servers that served its
// calls (which may have asked for its roots), and not to the others.
func TestE2EClientRootsChangesReachTheServersThatServedIt(t *testing.T) {
	_, url, oplog, _ := askerGateway(t, InputRequestsConfig{}, "one", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "rooted"}, nil)
	client.AddRoots(&mcp.Root{URI: "file:///home/alice"})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{aliceToken}}}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocolVersion})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	call := func(tool string) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		require.NoError(t, err)
		return text(t, res)
	}

	require.Equal(t, "file:///home/alice", call("one__roots"))
	client.AddRoots(&mcp.Root{URI: "file:///srv/alice"})
	waitLine(t, oplog, "roots changed")
	assert.Equal(t, "1", call("one__roots_changes"))
	assert.Equal(t, "0", call("two__roots_changes"), "a server that never served the client is not told")
	assert.Equal(t, "file:///home/alice\nfile:///srv/alice", call("one__roots"))
}
