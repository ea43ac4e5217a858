package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// waiterGateway starts a gateway on the waiter fixture server, whose
// stderr lines (what became of each call) land in the returned log.
func waiterGateway(t *testing.T) (*Gateway, *testenv.Buffer) {
	t.Helper()
	var logBuf testenv.Buffer
	cfg := &Config{Naming: NamingFirst, Servers: []ServerConfig{{
		Name: "waiter", Command: testenv.BuildGo(t, "./testdata/servers/waiter"), Tools: ToolFilter{Allow: []string{"*"}},
	}}}
	g, _ := startGateway(t, cfg, WithLogger(slog.New(slog.NewTextHandler(&logBuf, nil))))
	return g, &logBuf
}

// waitLine waits for the server to have written line to its stderr.
func waitLine(t *testing.T, logBuf *testenv.Buffer, line string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(logBuf.String(), fmt.Sprintf("line=%q", line)) },
		15*time.Second, 10*time.Millisecond, "the server wrote %q\n%s", line, logBuf.String())
}

// callInBackground starts a wait call with the given id and returns the
// channel its error arrives on.
func callInBackground(ctx context.Context, client *mcp.ClientSession, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"id": id}})
		done <- err
	}()
	return done
}

// TestE2EClientCancellationReachesTheUpstream: a call the client gives up
// on — by cancelling it, by disconnecting, or (2026-07-28) by closing the
// request's stream — is cancelled on the upstream server too, rather than
// left running there.
func TestE2EClientCancellationReachesTheUpstream(t *testing.T) {
	g, logBuf := waiterGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("notifications/cancelled", func(t *testing.T) {
		client := connectInMemory(t, ctx, g, legacyProtocolVersion, nil)
		callCtx, cancelCall := context.WithCancel(ctx)
		done := callInBackground(callCtx, client, "cancelled")
		waitLine(t, logBuf, "wait started cancelled")
		cancelCall()
		waitLine(t, logBuf, "wait cancelled cancelled")
		assert.Error(t, <-done)
	})

	t.Run("stdio client disconnects", func(t *testing.T) {
		// A client process that dies closes its pipes: here, the
		// connection under the client's transport.
		serverConn, clientConn := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- g.Serve(ctx, &mcp.IOTransport{Reader: serverConn, Writer: serverConn}, alice) }()
		client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
			&mcp.IOTransport{Reader: clientConn, Writer: clientConn}, nil)
		require.NoError(t, err)
		done := callInBackground(ctx, client, "stdio")
		waitLine(t, logBuf, "wait started stdio")
		require.NoError(t, clientConn.Close())
		waitLine(t, logBuf, "wait cancelled stdio")
		assert.Error(t, <-done)
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after its client disconnected")
		}
		_ = client.Close()
	})

	srv := httptest.NewServer(g.HTTPHandler(alice))
	defer func() {
		// A client's GET stream reconnecting while its client closes can
		// outlive the client; Close would wait for it. The gateway's side
		// ends with the connection, and goleak still finds any goroutine
		// of ours left behind.
		srv.CloseClientConnections()
		srv.Close()
	}()
	connectHTTP := func(t *testing.T, version string) *mcp.ClientSession {
		client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		require.NoError(t, err)
		return client
	}

	t.Run("HTTP client ends its session", func(t *testing.T) {
		// 2025-11-25: a dropped connection is not a cancellation (the
		// client may resume), the end of the session is.
		client := connectHTTP(t, legacyProtocolVersion)
		done := callInBackground(ctx, client, "session")
		waitLine(t, logBuf, "wait started session")
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, srv.URL+"/mcp", nil)
		require.NoError(t, err)
		req.Header.Set("Mcp-Session-Id", client.ID())
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "DELETE ends the session")
		waitLine(t, logBuf, "wait cancelled session")
		srv.CloseClientConnections()
		assert.Error(t, <-done)
		_ = client.Close()
	})

	t.Run("HTTP+SSE client disconnects", func(t *testing.T) {
		// The deprecated transport: the session lives as long as the
		// client's GET stream.
		client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
			&mcp.SSEClientTransport{Endpoint: srv.URL + "/sse"}, &mcp.ClientSessionOptions{ProtocolVersion: "2024-11-05"})
		require.NoError(t, err)
		done := callInBackground(ctx, client, "sse")
		waitLine(t, logBuf, "wait started sse")
		srv.CloseClientConnections()
		waitLine(t, logBuf, "wait cancelled sse")
		assert.Error(t, <-done)
		_ = client.Close()
	})

	t.Run("HTTP client closes the request's stream", func(t *testing.T) {
		// 2026-07-28: closing the stream is the cancellation.
		client := connectHTTP(t, modernProtocolVersion)
		done := callInBackground(ctx, client, "stream")
		waitLine(t, logBuf, "wait started stream")
		srv.CloseClientConnections()
		waitLine(t, logBuf, "wait cancelled stream")
		assert.Error(t, <-done)
		_ = client.Close()
	})
}

// TestE2EUpstreamCancellationReachesTheClient: a server that gives up on a
// request it made to the client (here an elicitation) has it cancelled at
// the client too.
func TestE2EUpstreamCancellationReachesTheClient(t *testing.T) {
	g, logBuf := waiterGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var asked, cancelled atomic.Bool
	client := connectInMemory(t, ctx, g, legacyProtocolVersion, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Store(true)
			select {
			case <-ctx.Done(): // the server's cancellation, relayed
				cancelled.Store(true)
				return nil, ctx.Err()
			case <-time.After(time.Minute):
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
		},
	})
	res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"after_ms": 500}})
	require.NoError(t, err)
	assert.True(t, asked.Load(), "the elicitation reached the client")
	assert.Contains(t, text(t, res), "cancelled", "the server gave up on its request")
	assert.Eventually(t, cancelled.Load, 5*time.Second, 10*time.Millisecond,
		"the client's handler saw the server's cancellation\n%s", logBuf.String())
}
