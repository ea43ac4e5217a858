package gateway

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/rego"
)

// TestE2EOlderProtocolVersionsAndLegacySSE: clients of every protocol
// version before 2025-11-25 — over stdio, streamable HTTP, and the
// deprecated HTTP+SSE transport at /sse — get the version they asked for,
// list and call tools, and are refused by policy like any other client.
func TestE2EOlderProtocolVersionsAndLegacySSE(t *testing.T) {
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}}, WithPolicy(rego.Demo()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := httptest.NewServer(g.HTTPHandler(alice))
	defer srv.Close()

	faces := []struct {
		name      string
		transport string // as the decision log records it
		connect   func() mcp.Transport
		serve     bool // the client talks to g.Serve
	}{
		{name: "stdio", transport: TransportStdio, serve: true},
		{name: "streamable HTTP", transport: TransportStreamableHTTP,
			connect: func() mcp.Transport { return &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"} }},
		{name: "HTTP+SSE", transport: TransportSSE,
			connect: func() mcp.Transport { return &mcp.SSEClientTransport{Endpoint: srv.URL + "/sse"} }},
	}
	for _, face := range faces {
		for _, version := range []string{"2025-06-18", "2025-03-26", "2024-11-05"} {
			t.Run(face.name+" "+version, func(t *testing.T) {
				var cs *mcp.ClientSession
				opts := &mcp.ClientSessionOptions{ProtocolVersion: version}
				if face.serve {
					serverT, clientT := mcp.NewInMemoryTransports()
					sctx, stop := context.WithCancel(ctx)
					served := make(chan error, 1)
					go func() { served <- g.Serve(sctx, serverT, alice) }()
					t.Cleanup(func() { stop(); <-served })
					var err error
					cs, err = mcp.NewClient(&mcp.Implementation{Name: "old"}, nil).Connect(ctx, clientT, opts)
					require.NoError(t, err)
				} else {
					var err error
					cs, err = mcp.NewClient(&mcp.Implementation{Name: "old"}, nil).Connect(ctx, face.connect(), opts)
					require.NoError(t, err)
				}
				defer cs.Close()
				assert.Equal(t, version, cs.InitializeResult().ProtocolVersion, "the gateway speaks the client's version")
				before := len(log.events(t))

				list, err := cs.ListTools(ctx, nil)
				require.NoError(t, err)
				assert.Equal(t, []string{"demo__add", "demo__echo", "demo__read_note"}, toolNames(list.Tools))
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 2, "b": 3}})
				require.NoError(t, err)
				assert.Equal(t, "5", text(t, res))
				denied, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": "private/diary"}})
				require.NoError(t, err)
				assert.True(t, denied.IsError)
				assert.Contains(t, text(t, denied), "denied by policy")
				_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__reset_notes"})
				assert.ErrorContains(t, err, `unknown tool "demo__reset_notes"`, "hidden, as if it did not exist")

				evs := log.events(t)[before:]
				require.Len(t, evs, 4, "list, add, denied read_note, hidden reset_notes")
				for _, ev := range evs {
					principal := ev["input"].(map[string]any)["principal"].(map[string]any)
					assert.Equal(t, "alice", principal["id"])
					assert.Equal(t, face.transport, principal["transport"])
				}
			})
		}
	}
}
