package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

func everythingStdio(t *testing.T) ServerConfig {
	return ServerConfig{
		Name:      "everything",
		Command:   testenv.BuildGo(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"),
		Tools:     ToolFilter{Allow: []string{"*"}},
		Resources: ToolFilter{Allow: []string{"test://static-*", "test://template/*"}},
		Prompts:   ToolFilter{Allow: []string{"test_simple_prompt"}},
	}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func post(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestE2EHTTPHygiene(t *testing.T) {
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}}, WithPolicy(rego.Demo()))
	base := serveHTTP(t, g)

	for name, tc := range map[string]struct {
		header map[string]string
		body   string
		want   int
	}{
		"cross-origin request":       {map[string]string{"Origin": "http://evil.example"}, initializeBody, http.StatusForbidden},
		"rebound host name":          {map[string]string{"Host": "evil.example"}, initializeBody, http.StatusForbidden},
		"rebound host and origin":    {map[string]string{"Host": "evil.example", "Origin": "http://evil.example"}, initializeBody, http.StatusForbidden},
		"loopback origin":            {map[string]string{"Origin": "http://localhost:3000"}, initializeBody, http.StatusOK},
		"no origin (not a browser)":  {nil, initializeBody, http.StatusOK},
		"body over the size limit":   {nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", maxRequestBytes) + `"}}`, http.StatusRequestEntityTooLarge},
		"REST from another origin":   {map[string]string{"Origin": "https://evil.example"}, `{"name":"demo__echo"}`, http.StatusForbidden},
		"REST body over size limit ": {nil, `{"name":"demo__echo","arguments":{"message":"` + strings.Repeat("a", maxRequestBytes) + `"}}`, http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			url := base + "/mcp"
			if strings.HasPrefix(tc.body, `{"name"`) {
				url = base + restExecute
			}
			resp := post(t, url, tc.body, tc.header)
			assert.Equal(t, tc.want, resp.StatusCode)
		})
	}

	// A configured origin is allowed.
	h := g.HTTPHandler(alice, HTTPOptions{AllowedOrigins: []string{"https://app.example"}})
	assert.True(t, originAllowed("https://app.example", "127.0.0.1:1", true, []string{"https://app.example"}))
	assert.NotNil(t, h)
}

func TestE2ERESTFace(t *testing.T) {
	g, log := startGateway(t, &Config{Servers: []ServerConfig{demoServer(t)}}, WithPolicy(rego.Demo()))
	base := serveHTTP(t, g)

	resp, err := http.Get(base + restTools)
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct{ Tools []*mcp.Tool }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__read_note"}, toolNames(list.Tools))

	execute := func(body string) (int, map[string]any) {
		resp := post(t, base+restExecute, body, nil)
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	status, out := execute(`{"name":"demo__echo","arguments":{"message":"hi"}}`)
	require.Equal(t, http.StatusOK, status, out)
	assert.Equal(t, "hi", out["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])

	hiddenStatus, hidden := execute(`{"name":"demo__reset_notes"}`)
	unknownStatus, unknown := execute(`{"name":"demo__nope"}`)
	assert.Equal(t, http.StatusNotFound, hiddenStatus)
	assert.Equal(t, unknownStatus, hiddenStatus)
	assert.EqualValues(t, jsonrpc.CodeMethodNotFound, hidden["error"].(map[string]any)["code"])
	assert.Equal(t, strings.ReplaceAll(unknown["error"].(map[string]any)["message"].(string), "demo__nope", "X"),
		strings.ReplaceAll(hidden["error"].(map[string]any)["message"].(string), "demo__reset_notes", "X"),
		"a hidden tool is indistinguishable from a missing one")

	status, out = execute(`{"name":"demo__echo","arguments":[1]}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.EqualValues(t, jsonrpc.CodeInvalidParams, out["error"].(map[string]any)["code"])
	status, _ = execute(`not json`)
	assert.Equal(t, http.StatusBadRequest, status)

	status, out = execute(`{"name":"demo__read_note","arguments":{"name":"private/diary"}}`)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, true, out["result"].(map[string]any)["isError"], "a denial with a reason is a tool error")

	resp, err = http.Get(base + restSpec)
	require.NoError(t, err)
	defer resp.Body.Close()
	var spec map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&spec))
	assert.Equal(t, "3.1.0", spec["openapi"])
	schemas := spec["components"].(map[string]any)["schemas"].(map[string]any)
	echo := schemas["tool.demo__echo"].(map[string]any)["properties"].(map[string]any)["arguments"].(map[string]any)
	assert.Contains(t, echo["properties"], "message", "the execute body carries the tool's input schema")
	assert.NotContains(t, schemas, "tool.demo__reset_notes", "hidden tools are not in the spec")

	for _, ev := range log.events(t) {
		if in, ok := ev["input"].(map[string]any); ok {
			assert.Equal(t, "rest", in["principal"].(map[string]any)["transport"])
		}
	}
}

func TestE2EResourcesAndPromptsUnderPolicy(t *testing.T) {
	g, log := startGateway(t, &Config{Naming: NamingFirst, Servers: []ServerConfig{everythingStdio(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := connectInMemory(t, ctx, g, "", nil)

	rs, err := client.ListResources(ctx, nil)
	require.NoError(t, err)
	var uris []string
	for _, r := range rs.Resources {
		uris = append(uris, r.URI)
	}
	assert.ElementsMatch(t, []string{"test://static-text", "test://static-binary"}, uris)

	read, err := client.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-text"})
	require.NoError(t, err)
	require.NotEmpty(t, read.Contents)
	tmpl, err := client.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://template/42/data"})
	require.NoError(t, err, "a URI matching an exposed template is read")
	assert.Contains(t, tmpl.Contents[0].Text, "42")

	_, hiddenErr := client.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://watched-resource"})
	_, missingErr := client.ReadResource(ctx, &mcp.ReadResourceParams{URI: "nowhere://x"})
	var hidden, missing *jsonrpc.Error
	require.ErrorAs(t, hiddenErr, &hidden)
	require.ErrorAs(t, missingErr, &missing)
	assert.Equal(t, missing.Code, hidden.Code, "a hidden resource is answered as a missing one")

	ps, err := client.ListPrompts(ctx, nil)
	require.NoError(t, err)
	require.Len(t, ps.Prompts, 1)
	assert.Equal(t, "test_simple_prompt", ps.Prompts[0].Name)
	_, err = client.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_simple_prompt"})
	require.NoError(t, err)
	_, err = client.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_prompt_with_arguments", Arguments: map[string]string{"arg1": "a", "arg2": "b"}})
	require.ErrorContains(t, err, "unknown prompt")

	actions := map[string]int{}
	for _, ev := range log.events(t) {
		actions[ev["input"].(map[string]any)["action"].(string)]++
	}
	assert.Equal(t, map[string]int{"resources/list": 1, "resources/read": 4, "prompts/list": 1, "prompts/get": 2}, actions,
		"every list, read and get is decided and logged (an unlisted URI goes to the one server serving resources)")
}

func TestE2EProgressAndLoggingReachTheCaller(t *testing.T) {
	g, _ := startGateway(t, &Config{Naming: NamingFirst, Servers: []ServerConfig{everythingStdio(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var tokens []any
	var logs []string
	client := connectInMemory(t, ctx, g, legacyProtocolVersion, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			tokens = append(tokens, req.Params.ProgressToken)
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, req.Params.Data.(string))
		},
	})
	params := &mcp.CallToolParams{Name: "test_tool_with_progress"}
	params.SetProgressToken("client-token")
	res, err := client.CallTool(ctx, params)
	require.NoError(t, err)
	assert.NotEqual(t, "client-token", text(t, res), "the server saw the gateway's own token")
	require.NoError(t, client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))
	_, err = client.CallTool(ctx, &mcp.CallToolParams{Name: "test_tool_with_logging"})
	require.NoError(t, err)

	// The client SDK hands notifications to handlers on its own goroutine.
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tokens) == 3 && len(logs) == 3
	}, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []any{"client-token", "client-token", "client-token"}, tokens, "every progress notification, under the client's token")
	assert.Len(t, logs, 3, "every log message")
}

// connectInMemory connects a client of the given protocol version ("" for
// the SDK's latest) to g.Serve.
func connectInMemory(t *testing.T, ctx context.Context, g *Gateway, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	serverT, clientT := mcp.NewInMemoryTransports()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- g.Serve(sctx, serverT, alice) }()
	client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(ctx, clientT, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		stop()
		<-served
	})
	return client
}

// TestE2EShutdownFinishesInFlightCalls stops Run while a call is in flight:
// the call completes, then Run returns.
func TestE2EShutdownFinishesInFlightCalls(t *testing.T) {
	var logBuf testenv.Buffer
	cfg := &Config{Naming: NamingFirst, Servers: []ServerConfig{everythingStdio(t)}, Listeners: []ListenerConfig{{HTTP: "127.0.0.1:0"}}}
	g, _ := startGateway(t, cfg, WithLogger(slog.New(slog.NewTextHandler(&logBuf, nil))))
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- g.Run(runCtx) }()
	var url string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`url=(http://\S+/mcp)`).FindStringSubmatch(logBuf.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var once sync.Once
	client, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { once.Do(stopRun) },
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.NoError(t, err)
	defer client.Close()
	params := &mcp.CallToolParams{Name: "test_tool_with_progress"}
	params.SetProgressToken(1)
	res, err := client.CallTool(ctx, params) // Run is stopped at its first progress notification
	require.NoError(t, err, "the call in flight when shutdown began completes\n%s", logBuf.String())
	assert.False(t, res.IsError)
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(shutdownGrace + 5*time.Second):
		t.Fatal("Run did not return after shutdown")
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(initializeBody)))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	assert.Error(t, err, "the listener is closed")
}
