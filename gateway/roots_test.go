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
