package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
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

// askerGateway serves the asker fixture (a server of the 2025-11-25 era
// only, asking its client for input during calls) under each of names
// (tools prefixed when there are several) over HTTP to the API keys of
// alice and bob. Its operational log (the server's stderr among it) and
// decision log are returned.
func askerGateway(t *testing.T, inputs InputRequestsConfig, names ...string) (g *Gateway, url string, oplog *testenv.Buffer, declog *decisionLog) {
	t.Helper()
	var servers []ServerConfig
	for _, name := range names {
		servers = append(servers, ServerConfig{Name: name, Command: testenv.BuildGo(t, "./testdata/servers/asker")})
	}
	return askerServersGateway(t, inputs, servers...)
}

// askerServersGateway is askerGateway for the asker fixture as each of
// servers (over stdio or HTTP), everything of theirs allowed. A server
// named "modern…" must be the fixture run with -modern.
func askerServersGateway(t *testing.T, inputs InputRequestsConfig, servers ...ServerConfig) (g *Gateway, url string, oplog *testenv.Buffer, declog *decisionLog) {
	t.Helper()
	key := func(id, token string) APIKeyConfig {
		sum := sha256.Sum256([]byte(token))
		return APIKeyConfig{ID: id, SHA256: hex.EncodeToString(sum[:])}
	}
	cfg := &Config{Naming: NamingFirst, InputRequests: inputs,
		Auth: AuthConfig{Resource: testResource, APIKeys: []APIKeyConfig{key("alice", aliceToken), key("bob", bobToken)}}}
	if len(servers) > 1 {
		cfg.Naming = NamingPrefix
	}
	for _, sc := range servers {
		all := ToolFilter{Allow: []string{"*"}}
		sc.Tools, sc.Prompts, sc.Resources = all, all, all
		cfg.Servers = append(cfg.Servers, sc)
	}
	oplog = &testenv.Buffer{}
	g, declog = startGateway(t, cfg, WithLogger(slog.New(slog.NewTextHandler(oplog, nil))))
	for _, u := range g.upstreams {
		// The fixture speaks only the legacy era, unless run with -modern
		// (as servers named "modern…" are).
		require.Equal(t, strings.HasPrefix(u.cfg.Name, "modern"), u.modern != nil, "server %q: a 2026-07-28 link\n%s", u.cfg.Name, oplog.String())
	}
	srv := httptest.NewServer(g.HTTPHandler(policy.Principal{}))
	t.Cleanup(srv.Close)
	return g, srv.URL, oplog, declog
}

// askerRemoteAndLocal is askerServersGateway for the asker fixture twice:
// as "remote", a streamable-HTTP server of the 2025-11-25 era (its stderr
// to remoteStderr, if not nil), and as "local", over stdio.
func askerRemoteAndLocal(t *testing.T, remoteStderr io.Writer) (g *Gateway, url string, oplog *testenv.Buffer, declog *decisionLog) {
	t.Helper()
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	remote := startOnFreePort(t, func(addr string) *exec.Cmd {
		cmd := exec.Command(asker, "-http", addr)
		cmd.Stderr = remoteStderr
		return cmd
	})
	return askerServersGateway(t, InputRequestsConfig{},
		ServerConfig{Name: "remote", URL: "http://" + remote + "/mcp", AllowPrivateNetwork: true},
		ServerConfig{Name: "local", Command: asker})
}

// modernClient connects a 2026-07-28 client with token; opts says how it
// answers input requests.
func modernClient(t *testing.T, ctx context.Context, url, token string, opts *mcp.ClientOptions, roots ...string) *mcp.ClientSession {
	t.Helper()
	return clientOfEra(t, ctx, modernProtocolVersion, url, token, opts, roots...)
}

// legacyClient connects a 2025-11-25 client with token, in a session.
func legacyClient(t *testing.T, ctx context.Context, url, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return clientOfEra(t, ctx, legacyProtocolVersion, url, token, opts)
}

func clientOfEra(t *testing.T, ctx context.Context, version, url, token string, opts *mcp.ClientOptions, roots ...string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "client of " + version}, opts)
	for _, r := range roots {
		client.AddRoots(&mcp.Root{URI: r})
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// manualClients connects alice and bob as 2026-07-28 clients that declare
// elicitation but leave input_required results to the test, which retries
// by hand.
func manualClients(t *testing.T, ctx context.Context, url string) (alice, bob *mcp.ClientSession) {
	t.Helper()
	manual := &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil }}
	return modernClient(t, ctx, url, aliceToken, manual), modernClient(t, ctx, url, bobToken, manual)
}

// toolCalls are the tools/call decisions in the log for tool, in order.
func toolCalls(t *testing.T, declog *decisionLog, tool string) []map[string]any {
	return decisionsOn(t, declog, "tools/call", "tool", "name", tool)
}

// decisionsOn are the decisions on action in the log whose input[object][key]
// is value, in order.
func decisionsOn(t *testing.T, declog *decisionLog, action, object, key, value string) []map[string]any {
	var out []map[string]any
	for _, ev := range declog.events(t) {
		in, _ := ev["input"].(map[string]any)
		o, _ := in[object].(map[string]any)
		if in["action"] == action && o[key] == value {
			out = append(out, ev)
		}
	}
	return out
}

// TestE2EInputRequestsBridgedToModernClients: a 2025-era server's
// elicitation, sampling and roots requests during a 2026-07-28 client's
// call reach that client as input_required results, and its answers reach
// the server, which finishes the same call — over as many round trips as
// it asks, each one decided by policy and logged.
func TestE2EInputRequestsBridgedToModernClients(t *testing.T) {
	g, url, _, declog := askerGateway(t, InputRequestsConfig{}, "asker")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var questions []string
	var asked atomic.Int32
	cs := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			questions = append(questions, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			prompt := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "re: " + prompt}}, nil
		},
	}, "file:///home/alice", "file:///srv/alice")
	call := func(tool string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		require.NoError(t, err)
		require.False(t, res.IsError, text(t, res))
		return text(t, res)
	}

	assert.Equal(t, "accept ok=true", call("confirm", map[string]any{"question": "deploy?"}))
	assert.Equal(t, []string{"deploy?"}, questions)
	assert.Len(t, toolCalls(t, declog, "confirm"), 2, "the call and its retry are each decided and logged")

	assert.Equal(t, "accept ok=true; accept ok=true", call("twice", map[string]any{}))
	assert.Equal(t, []string{"deploy?", "first?", "second?"}, questions)
	assert.Len(t, toolCalls(t, declog, "twice"), 3, "two requests, two retries, one decision each")

	assert.Equal(t, "test-model: re: hello", call("sample", map[string]any{"prompt": "hello"}))
	assert.Equal(t, "file:///home/alice\nfile:///srv/alice", call("roots", map[string]any{}))
	for _, ev := range toolCalls(t, declog, "twice") {
		assert.Equal(t, true, ev["result"].(map[string]any)["allow"])
		assert.Equal(t, "alice", ev["input"].(map[string]any)["principal"].(map[string]any)["id"])
	}
	assert.EqualValues(t, 3, asked.Load())

	// A client that declared no elicitation capability is not asked: the
	// server is told, and its call ends as it chooses.
	plain := modernClient(t, ctx, url, bobToken, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"question": "q"}})
	require.NoError(t, err)
	assert.Contains(t, text(t, res), "did not declare the capability")
	res, err = plain.CallTool(ctx, &mcp.CallToolParams{Name: "roots", Arguments: map[string]any{}})
	require.NoError(t, err)
	assert.Contains(t, text(t, res), "method not found", "-32601, as the spec prescribes for a client without roots")

	require.Eventually(t, func() bool { return g.inputs.heldCount() == 0 }, 5*time.Second, 10*time.Millisecond, "nothing is held after the calls end")
}

// inputRequired calls tool as cs without answering input requests and
// returns the input_required result.
func firstRound(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	require.True(t, res.NeedsInput(), "an input_required result: %+v", res.Content)
	require.Len(t, res.InputRequests, 1)
	require.True(t, strings.HasPrefix(res.RequestState, "mcp-warden."))
	return res
}

// TestE2EHeldCallsAreBoundAndBounded: a held call continues only for the
// principal that made it, with the same tool and arguments; another
// principal's retry learns nothing; a call whose client does not come
// back is cancelled on the server after the timeout; the number of held
// calls is bounded per principal.
func TestE2EHeldCallsAreBoundAndBounded(t *testing.T) {
	g, url, oplog, _ := askerGateway(t, InputRequestsConfig{Timeout: 3 * time.Second, MaxPerPrincipal: 1}, "one", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice, bob := manualClients(t, ctx, url)
	args := map[string]any{"question": "deploy?"}

	first := firstRound(t, ctx, alice, "one__confirm", args)
	var key string
	for k, req := range first.InputRequests {
		key = k
		require.Equal(t, "deploy?", req.(*mcp.ElicitParams).Message)
	}
	answer := mcp.InputResponseMap{key: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": false}}}
	retry := func(cs *mcp.ClientSession, tool string, args map[string]any, state string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, InputResponses: answer, RequestState: state})
	}

	// Bob's retry with alice's state is refused as an unknown state is.
	_, err := retry(bob, "one__confirm", args, first.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	_, err = retry(bob, "one__confirm", args, "mcp-warden.guessed")
	require.ErrorContains(t, err, "unknown or expired requestState")
	// Alice's retry of another call is refused; the held call stays.
	_, err = retry(alice, "one__confirm", map[string]any{"question": "other"}, first.RequestState)
	require.ErrorContains(t, err, "another tools/call")
	_, err = retry(alice, "two__confirm", args, first.RequestState)
	require.ErrorContains(t, err, "another tools/call")
	// One held call per principal here: alice's second is refused at the
	// server (which answers the call itself), bob's is held.
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "two__confirm", Arguments: map[string]any{"question": "again?"}})
	require.NoError(t, err)
	assert.False(t, res.NeedsInput())
	assert.Contains(t, text(t, res), "too many calls waiting for client input")
	bobs := firstRound(t, ctx, bob, "two__confirm", args)
	assert.Equal(t, 2, g.inputs.heldCount())

	// Alice's own retry continues her call.
	res, err = retry(alice, "one__confirm", args, first.RequestState)
	require.NoError(t, err)
	assert.Equal(t, "accept ok=false", text(t, res))
	// A state is good for one retry only.
	_, err = retry(alice, "one__confirm", args, first.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")

	// Bob never comes back: after the timeout his call is cancelled on the
	// server, and his late retry finds nothing.
	waitLine(t, oplog, "confirm cancelled")
	assert.Contains(t, oplog.String(), "call held for client input expired")
	_, err = retry(bob, "two__confirm", args, bobs.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	assert.Zero(t, g.inputs.heldCount())
}

// switchedEngine evaluates with one of two real policies, switched while
// the gateway runs: the retry of a held call meets a policy that changed
// since the call began (as a time-bound rule would).
type switchedEngine struct {
	allow, deny policy.Engine
	denying     atomic.Bool
}

func (e *switchedEngine) current() policy.Engine {
	if e.denying.Load() {
		return e.deny
	}
	return e.allow
}

func (e *switchedEngine) Evaluate(ctx context.Context, input []byte) (any, error) {
	return e.current().Evaluate(ctx, input)
}

func (e *switchedEngine) Revision() string { return e.current().Revision() }

// TestE2EHeldCallRetryIsDecidedAfresh: each retry of a held call is a
// tools/call decided by policy and logged; one the policy now denies gets
// the denial, and the held call is cancelled on the server.
func TestE2EHeldCallRetryIsDecidedAfresh(t *testing.T) {
	g, url, oplog, declog := askerGateway(t, InputRequestsConfig{}, "asker")
	allowAll, err := rego.Load(filepath.Join(testenv.RepoRoot(t), "testdata", "policies", "allow-all"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "deny.rego"), []byte(
		"package mcp.warden\n\ndecision := {\"allow\": false, \"reason\": \"switched to denying\"}\n"), 0o600))
	denyAll, err := rego.Load(dir)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sw := &switchedEngine{}
	sw.allow, err = policy.NewRegoEngine(ctx, allowAll, nil)
	require.NoError(t, err)
	sw.deny, err = policy.NewRegoEngine(ctx, denyAll, nil)
	require.NoError(t, err)
	g.decider = policy.NewDecider(sw, g.declog) // before the first request

	cs := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil }})
	args := map[string]any{"question": "deploy?"}
	first := firstRound(t, ctx, cs, "confirm", args)
	answers := mcp.InputResponseMap{}
	for k := range first.InputRequests {
		answers[k] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}
	}
	sw.denying.Store(true)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: args, InputResponses: answers, RequestState: first.RequestState})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "denied by policy: switched to denying")
	waitLine(t, oplog, "confirm cancelled")
	assert.Zero(t, g.inputs.heldCount())

	calls := toolCalls(t, declog, "confirm")
	require.Len(t, calls, 2)
	assert.Equal(t, true, calls[0]["result"].(map[string]any)["allow"])
	assert.Equal(t, false, calls[1]["result"].(map[string]any)["allow"])

	sw.denying.Store(false)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: args, InputResponses: answers, RequestState: first.RequestState})
	require.ErrorContains(t, err, "unknown or expired requestState", "the denied call is gone")
}

// switchedGateway is askerGateway deciding with sw, which allows until
// switched to denying.
func switchedGateway(t *testing.T, ctx context.Context, inputs InputRequestsConfig) (g *Gateway, url string, oplog *testenv.Buffer, declog *decisionLog, sw *switchedEngine) {
	t.Helper()
	g, url, oplog, declog = askerGateway(t, inputs, "asker")
	allowAll, err := rego.Load(filepath.Join(testenv.RepoRoot(t), "testdata", "policies", "allow-all"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "deny.rego"), []byte(
		"package mcp.warden\n\ndecision := {\"allow\": false, \"reason\": \"switched to denying\"}\n"), 0o600))
	denyAll, err := rego.Load(dir)
	require.NoError(t, err)
	sw = &switchedEngine{}
	sw.allow, err = policy.NewRegoEngine(ctx, allowAll, nil)
	require.NoError(t, err)
	sw.deny, err = policy.NewRegoEngine(ctx, denyAll, nil)
	require.NoError(t, err)
	g.decider = policy.NewDecider(sw, g.declog) // before the first request
	return g, url, oplog, declog, sw
}

// acceptAll answers every request of a manual round: an elicitation
// "accept ok=true", a sampling request "yes" from "test-model".
func acceptAll(requests mcp.InputRequestMap) mcp.InputResponseMap {
	answers := mcp.InputResponseMap{}
	for k, req := range requests {
		switch req.(type) {
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams:
			answers[k] = &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "yes"}}
		default:
			answers[k] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}
		}
	}
	return answers
}

// TestE2EPromptsAndResourcesBridgedToModernClients: a 2025-era server's
// elicitation during a 2026-07-28 client's prompts/get or resources/read
// reaches that client as an input_required result, and its answer reaches
// the server, which finishes the same request; each round is decided by
// policy and logged.
func TestE2EPromptsAndResourcesBridgedToModernClients(t *testing.T) {
	g, url, _, declog := askerGateway(t, InputRequestsConfig{}, "asker")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var questions []string
	cs := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			questions = append(questions, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
	})

	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "approval", Arguments: map[string]string{"question": "publish?"}})
	require.NoError(t, err)
	require.Len(t, prompt.Messages, 1)
	assert.Equal(t, "accept ok=true", prompt.Messages[0].Content.(*mcp.TextContent).Text)
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret"})
	require.NoError(t, err)
	require.Len(t, read.Contents, 1)
	assert.Equal(t, "secret: accept ok=true", read.Contents[0].Text)
	assert.Equal(t, []string{"publish?", "reveal the secret?"}, questions)

	gets := decisionsOn(t, declog, "prompts/get", "prompt", "name", "approval")
	reads := decisionsOn(t, declog, "resources/read", "resource", "uri", "asker://secret")
	require.Len(t, gets, 2, "the get and its retry are each decided and logged")
	require.Len(t, reads, 2, "the read and its retry are each decided and logged")
	for _, ev := range append(gets, reads...) {
		assert.Equal(t, true, ev["result"].(map[string]any)["allow"])
		assert.Equal(t, "alice", ev["input"].(map[string]any)["principal"].(map[string]any)["id"])
	}
	require.Eventually(t, func() bool { return g.inputs.heldCount() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestE2EHeldPromptsAndReadsAreBoundAndDecidedAfresh: a held prompts/get
// or resources/read continues only for its principal and the same prompt
// and arguments or URI; a retry the policy now denies ends it on the
// server; one whose client does not come back expires.
func TestE2EHeldPromptsAndReadsAreBoundAndDecidedAfresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, url, oplog, declog, sw := switchedGateway(t, ctx, InputRequestsConfig{Timeout: 3 * time.Second})
	alice, bob := manualClients(t, ctx, url)
	args := map[string]string{"question": "publish?"}
	get := func(cs *mcp.ClientSession, args map[string]string, answers mcp.InputResponseMap, state string) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "approval", Arguments: args, InputResponses: answers, RequestState: state})
	}

	first, err := get(alice, args, nil, "")
	require.NoError(t, err)
	require.True(t, first.NeedsInput())
	require.Len(t, first.InputRequests, 1)
	answers := acceptAll(first.InputRequests)
	for _, req := range first.InputRequests {
		assert.Equal(t, "publish?", req.(*mcp.ElicitParams).Message)
	}
	// Another principal, other arguments, another method: refused, and the
	// held call stays.
	_, err = get(bob, args, answers, first.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	_, err = get(alice, map[string]string{"question": "other"}, answers, first.RequestState)
	require.ErrorContains(t, err, "another prompts/get")
	_, err = alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret", InputResponses: answers, RequestState: first.RequestState})
	require.ErrorContains(t, err, "another prompts/get")
	_, err = alice.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{}, InputResponses: answers, RequestState: first.RequestState})
	require.ErrorContains(t, err, "another prompts/get")
	assert.Equal(t, 1, g.inputs.heldCount())

	// The policy now denies: the retry gets the denial, and the held get
	// is cancelled on the server.
	sw.denying.Store(true)
	_, err = get(alice, args, answers, first.RequestState)
	require.ErrorContains(t, err, "denied by policy: switched to denying")
	waitLine(t, oplog, "approval cancelled")
	assert.Zero(t, g.inputs.heldCount())
	gets := decisionsOn(t, declog, "prompts/get", "prompt", "name", "approval")
	require.Len(t, gets, 4, "the first round and every retry, each decided and logged")
	assert.Equal(t, true, gets[0]["result"].(map[string]any)["allow"])
	assert.Equal(t, false, gets[3]["result"].(map[string]any)["allow"])
	sw.denying.Store(false)
	_, err = get(alice, args, answers, first.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState", "the denied get is gone")

	// A read continues with its answers; one whose client does not come
	// back expires and is cancelled on the server.
	read, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret"})
	require.NoError(t, err)
	require.True(t, read.NeedsInput())
	read, err = alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret", InputResponses: acceptAll(read.InputRequests), RequestState: read.RequestState})
	require.NoError(t, err)
	require.False(t, read.NeedsInput())
	assert.Equal(t, "secret: accept ok=true", read.Contents[0].Text)
	bobs, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret"})
	require.NoError(t, err)
	require.True(t, bobs.NeedsInput())
	waitLine(t, oplog, "secret cancelled")
	assert.Contains(t, oplog.String(), "call held for client input expired")
	_, err = bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret", InputResponses: acceptAll(bobs.InputRequests), RequestState: bobs.RequestState})
	require.ErrorContains(t, err, "unknown or expired requestState")
	assert.Zero(t, g.inputs.heldCount())
}

// TestE2EProgressOfABridgedCallReachesTheCurrentRound: what the server
// notifies during a bridged call goes to the client request being answered
// at the time, under that request's progress token; what it notifies
// while the call waits for the client's retry goes nowhere.
func TestE2EProgressOfABridgedCallReachesTheCurrentRound(t *testing.T) {
	_, url, oplog, _ := askerGateway(t, InputRequestsConfig{}, "asker")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var got []string
	cs := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%v: %s", req.Params.ProgressToken, req.Params.Message))
		}})
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{}}
	params.SetProgressToken("round-1")
	first, err := cs.CallTool(ctx, params)
	require.NoError(t, err)
	require.True(t, first.NeedsInput())
	waitLine(t, oplog, "progress sent while waiting")

	retry := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{}, InputResponses: acceptAll(first.InputRequests), RequestState: first.RequestState}
	retry.SetProgressToken("round-2")
	res, err := cs.CallTool(ctx, retry)
	require.NoError(t, err)
	assert.Equal(t, "accept ok=true", text(t, res))
	// The client hands notifications to its handler on a goroutine of its own.
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	require.Eventually(t, func() bool { return len(received()) >= 2 }, 5*time.Second, 10*time.Millisecond, "got %v", received())
	assert.Equal(t, []string{"round-1: before", "round-2: after"}, received())
}

// TestE2ELogMessagesOfABridgedCallReachTheirRound: the log messages a
// 2025-era server sends during a 2026-07-28 client's bridged call reach
// that client's request of the round they were sent in, at that request's
// log level, before and after the server's elicitation or sampling
// request; one sent while the call waits for the client's retry is
// dropped. Over streamable HTTP two principals' bridged calls are held at
// once and each hears only its own; over stdio one client's call is heard
// while another client is connected, and while two clients' calls are in
// flight there the server's messages say nothing of whose they are: the
// second client's sampling request is refused and its log messages
// dropped.
func TestE2ELogMessagesOfABridgedCallReachTheirRound(t *testing.T) {
	var remoteStderr testenv.Buffer
	g, url, oplog, _ := askerRemoteAndLocal(t, &remoteStderr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var h hearing
	connect := func(token, who string) *mcp.ClientSession {
		return modernClient(t, ctx, url, token, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
			ElicitationHandler:    func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
			CreateMessageHandler:  func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) { return nil, nil },
			LoggingMessageHandler: h.handler(t, who)})
	}
	alice, bob := connect(aliceToken, "alice"), connect(bobToken, "bob")
	// round calls tool as cs with the log level given in its _meta; the
	// first round (no state) must ask for input, a retry answers it.
	round := func(cs *mcp.ClientSession, tool string, args map[string]any, level string, prev *mcp.CallToolResult) *mcp.CallToolResult {
		t.Helper()
		params := &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{mcp.MetaKeyLogLevel: level}}
		if prev != nil {
			params.InputResponses, params.RequestState = acceptAll(prev.InputRequests), prev.RequestState
		}
		res, err := cs.CallTool(ctx, params)
		require.NoError(t, err)
		require.Equal(t, prev == nil, res.NeedsInput(), "%+v", res.Content)
		return res
	}
	// A first round at level debug hears both of "before"; a retry at
	// level info hears only the info one of "after": each message reaches
	// a request at the level of the round it was sent in.
	heardBeforeAndAfter := func(tag string) []string {
		return []string{tag + " before", tag + " before (debug)", tag + " after"}
	}

	// Over HTTP: alice's call (elicitation) and bob's (sampling) are held
	// on the server at once, and both have sent "while waiting" while held.
	alices := round(alice, "remote__progress", map[string]any{"tag": "alice", "ask": "elicit"}, "debug", nil)
	bobs := round(bob, "remote__progress", map[string]any{"tag": "bob", "ask": "sample"}, "debug", nil)
	assert.Equal(t, 2, g.inputs.heldCount())
	require.Eventually(t, func() bool { return strings.Count(remoteStderr.String(), "progress sent while waiting") == 2 },
		15*time.Second, 10*time.Millisecond, remoteStderr.String())
	assert.Equal(t, "test-model: yes", text(t, round(bob, "remote__progress", map[string]any{"tag": "bob", "ask": "sample"}, "info", bobs)))
	assert.Equal(t, "accept ok=true", text(t, round(alice, "remote__progress", map[string]any{"tag": "alice", "ask": "elicit"}, "info", alices)))
	assert.ElementsMatch(t, heardBeforeAndAfter("alice"), h.await(t, "alice", 3))
	assert.ElementsMatch(t, heardBeforeAndAfter("bob"), h.await(t, "bob", 3))

	// Over stdio, alice's call alone: bob, connected, hears nothing of it.
	args := map[string]any{"tag": "alice over stdio", "ask": "elicit"}
	alices = round(alice, "local__progress", args, "debug", nil)
	waitLine(t, oplog, "progress sent while waiting")
	assert.Equal(t, "accept ok=true", text(t, round(alice, "local__progress", args, "info", alices)))
	assert.ElementsMatch(t, append(heardBeforeAndAfter("alice"), heardBeforeAndAfter("alice over stdio")...), h.await(t, "alice", 6))

	// Over stdio, bob calls while alice's call is held: bob's sampling
	// request is refused and his "before" dropped (either could be
	// alice's); alice's "after", sent when hers is the only call again,
	// reaches her.
	args = map[string]any{"tag": "alice held", "ask": "elicit"}
	alices = round(alice, "local__progress", args, "debug", nil)
	res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "local__progress", Arguments: map[string]any{"tag": "bob over stdio", "ask": "sample"},
		Meta: mcp.Meta{mcp.MetaKeyLogLevel: "debug"}})
	require.NoError(t, err)
	require.False(t, res.NeedsInput())
	assert.Contains(t, text(t, res), "no single client request in flight")
	assert.Equal(t, "accept ok=true", text(t, round(alice, "local__progress", args, "info", alices)))
	assert.ElementsMatch(t, append(append(heardBeforeAndAfter("alice"), heardBeforeAndAfter("alice over stdio")...), heardBeforeAndAfter("alice held")...),
		h.await(t, "alice", 9))
	assert.ElementsMatch(t, heardBeforeAndAfter("bob"), h.of("bob"), "bob heard nothing over stdio")
	require.Eventually(t, func() bool { return g.inputs.heldCount() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestE2EHeldPromptsAndReadsAreBounded: prompts/get and resources/read
// count against the same per-principal limit of held calls as tools/call,
// across methods and servers: a principal at its limit is refused at the
// server while another principal is held. A held get or read continues
// only for its principal and method; its count is given back when it ends,
// answered or expired.
func TestE2EHeldPromptsAndReadsAreBounded(t *testing.T) {
	g, url, oplog, _ := askerGateway(t, InputRequestsConfig{Timeout: 3 * time.Second, MaxPerPrincipal: 1}, "one", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice, bob := manualClients(t, ctx, url)
	args := map[string]string{"question": "publish?"}
	get := func(cs *mcp.ClientSession, prompt string, answers mcp.InputResponseMap, state string) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt, Arguments: args, InputResponses: answers, RequestState: state})
	}
	read := func(cs *mcp.ClientSession, answers mcp.InputResponseMap, state string) (*mcp.ReadResourceResult, error) {
		return cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "asker://secret", InputResponses: answers, RequestState: state})
	}

	// Alice's read (served by "one") is held; her get on the other server
	// passes her limit and is refused at the server, which ends it.
	alicesRead, err := read(alice, nil, "")
	require.NoError(t, err)
	require.True(t, alicesRead.NeedsInput())
	_, err = get(alice, "two__approval", nil, "")
	require.ErrorContains(t, err, "too many calls waiting for client input")
	// The limit is alice's: bob's get is held.
	bobsGet, err := get(bob, "two__approval", nil, "")
	require.NoError(t, err)
	require.True(t, bobsGet.NeedsInput())
	assert.Equal(t, 2, g.inputs.heldCount())

	// Bound: bob cannot continue alice's read, nor alice bob's get; a
	// state continues only the method it was issued for.
	answers := acceptAll(alicesRead.InputRequests)
	_, err = read(bob, answers, alicesRead.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	_, err = get(alice, "two__approval", acceptAll(bobsGet.InputRequests), bobsGet.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	_, err = get(alice, "one__approval", answers, alicesRead.RequestState)
	require.ErrorContains(t, err, "another resources/read")
	assert.Equal(t, 2, g.inputs.heldCount(), "refused retries leave the held calls as they are")

	// Alice's own retry ends her read and gives her count back: her next
	// get is held.
	res, err := read(alice, answers, alicesRead.RequestState)
	require.NoError(t, err)
	require.False(t, res.NeedsInput())
	assert.Equal(t, "secret: accept ok=true", res.Contents[0].Text)
	alicesGet, err := get(alice, "one__approval", nil, "")
	require.NoError(t, err)
	require.True(t, alicesGet.NeedsInput())

	// Nobody comes back: both gets expire and are cancelled on their
	// servers; late retries find nothing, and the counts are given back.
	require.Eventually(t, func() bool { return strings.Count(oplog.String(), `line="approval cancelled"`) == 2 },
		15*time.Second, 10*time.Millisecond, oplog.String())
	assert.Equal(t, 2, strings.Count(oplog.String(), "call held for client input expired"))
	_, err = get(bob, "two__approval", acceptAll(bobsGet.InputRequests), bobsGet.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	_, err = get(alice, "one__approval", acceptAll(alicesGet.InputRequests), alicesGet.RequestState)
	require.ErrorContains(t, err, "unknown or expired requestState")
	assert.Zero(t, g.inputs.heldCount())
	again, err := read(alice, nil, "")
	require.NoError(t, err)
	require.True(t, again.NeedsInput(), "after expiry alice may be held again")
	res, err = read(alice, acceptAll(again.InputRequests), again.RequestState)
	require.NoError(t, err)
	assert.Equal(t, "secret: accept ok=true", res.Contents[0].Text)
	assert.Zero(t, g.inputs.heldCount())
}

// TestE2EInputRequestsOfAnHTTPServerReachTheirOwnCall: a streamable-HTTP
// server of the 2025-11-25 era sends its requests for input on the
// response stream of the call they serve, so with calls of several clients
// in flight on it at once, each request reaches the client of its own
// call: two 2026-07-28 clients' held (bridged) calls and a 2025-era
// client's call. On a stdio server, whose requests say nothing of the call
// they serve, a second client's request is still refused.
func TestE2EInputRequestsOfAnHTTPServerReachTheirOwnCall(t *testing.T) {
	g, url, _, declog := askerRemoteAndLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice, bob := manualClients(t, ctx, url)
	// question is the one input request of a first round, which carries
	// nothing of the gateway's own.
	question := func(res *mcp.CallToolResult) string {
		t.Helper()
		for _, req := range res.InputRequests {
			p := req.(*mcp.ElicitParams)
			assert.Empty(t, p.Meta, "the gateway's mark does not reach the client")
			return p.Message
		}
		return ""
	}
	answer := func(res *mcp.CallToolResult, ok bool) mcp.InputResponseMap {
		answers := mcp.InputResponseMap{}
		for k := range res.InputRequests {
			answers[k] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": ok}}
		}
		return answers
	}

	// Alice's and bob's calls are held on the remote server at once, each
	// with its own question.
	alices := firstRound(t, ctx, alice, "remote__confirm", map[string]any{"question": "alice?"})
	bobs := firstRound(t, ctx, bob, "remote__confirm", map[string]any{"question": "bob?"})
	assert.Equal(t, "alice?", question(alices))
	assert.Equal(t, "bob?", question(bobs))
	assert.Equal(t, 2, g.inputs.heldCount())

	// Meanwhile a 2025-era client's call on the same server is asked its
	// own question, as a request.
	var asked []string
	legacy := legacyClient(t, ctx, url, bobToken, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			assert.Empty(t, req.Params.Meta, "the gateway's mark does not reach the client")
			return &mcp.ElicitResult{Action: "decline"}, nil
		}})
	res, err := legacy.CallTool(ctx, &mcp.CallToolParams{Name: "remote__confirm", Arguments: map[string]any{"question": "legacy?"}})
	require.NoError(t, err)
	assert.Equal(t, "decline ok=<nil>", text(t, res))
	assert.Equal(t, []string{"legacy?"}, asked)

	// Each answer reaches the call it was asked for, in any order.
	res, err = bob.CallTool(ctx, &mcp.CallToolParams{Name: "remote__confirm", Arguments: map[string]any{"question": "bob?"},
		InputResponses: answer(bobs, false), RequestState: bobs.RequestState})
	require.NoError(t, err)
	assert.Equal(t, "accept ok=false", text(t, res))
	res, err = alice.CallTool(ctx, &mcp.CallToolParams{Name: "remote__confirm", Arguments: map[string]any{"question": "alice?"},
		InputResponses: answer(alices, true), RequestState: alices.RequestState})
	require.NoError(t, err)
	assert.Equal(t, "accept ok=true", text(t, res))
	for _, ev := range toolCalls(t, declog, "remote__confirm") {
		assert.Equal(t, true, ev["result"].(map[string]any)["allow"], "every round is decided")
	}
	assert.Len(t, toolCalls(t, declog, "remote__confirm"), 5, "two calls with a retry each, and the 2025-era call")

	// Over stdio, with alice's call held, bob's call finds the server's
	// request refused: it could be either's.
	alices = firstRound(t, ctx, alice, "local__confirm", map[string]any{"question": "alice?"})
	res, err = bob.CallTool(ctx, &mcp.CallToolParams{Name: "local__confirm", Arguments: map[string]any{"question": "bob?"}})
	require.NoError(t, err)
	require.False(t, res.NeedsInput())
	assert.Contains(t, text(t, res), "no single client request in flight")
	res, err = alice.CallTool(ctx, &mcp.CallToolParams{Name: "local__confirm", Arguments: map[string]any{"question": "alice?"},
		InputResponses: answer(alices, true), RequestState: alices.RequestState})
	require.NoError(t, err)
	assert.Equal(t, "accept ok=true", text(t, res))
	require.Eventually(t, func() bool { return g.inputs.heldCount() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestE2ETypeScriptClientCompletesABridgedCall: a client of the official
// TypeScript SDK (v2, @modelcontextprotocol/client) pinned to 2026-07-28
// calls a tool of a 2025-era server that asks twice for input: the SDK
// answers both input_required rounds with its elicitation handler and gets
// the server's result; every round is decided and logged as its principal.
func TestE2ETypeScriptClientCompletesABridgedCall(t *testing.T) {
	g, url, _, declog := askerGateway(t, InputRequestsConfig{}, "asker")
	call := filepath.Join(t.TempDir(), "call.json")
	require.NoError(t, os.WriteFile(call, []byte(`{"tool":"twice","arguments":{},"answer":{"ok":true}}`), 0o600))

	cmd := exec.Command(testenv.Node(t), filepath.Join(testenv.RepoRoot(t), "testdata", "clients", "typescript-client-mrtr.cjs"),
		url+"/mcp", aliceToken, call)
	cmd.Env = append(os.Environ(), "NODE_PATH="+testenv.NodeModules(t))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "client failed:\n%s", stderr.String())
	var got struct {
		Era    string              `json:"era"`
		Asked  []string            `json:"asked"`
		Result *mcp.CallToolResult `json:"result"`
		Error  map[string]any      `json:"error"`
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	require.Nil(t, got.Error)
	assert.Equal(t, modernProtocolVersion, got.Era)
	assert.Equal(t, []string{"first?", "second?"}, got.Asked)
	assert.Equal(t, "accept ok=true; accept ok=true", text(t, got.Result))

	calls := toolCalls(t, declog, "twice")
	require.Len(t, calls, 3, "the call and its two retries")
	for _, ev := range calls {
		assert.Equal(t, true, ev["result"].(map[string]any)["allow"])
		assert.Equal(t, "alice", ev["input"].(map[string]any)["principal"].(map[string]any)["id"])
	}
	require.Eventually(t, func() bool { return g.inputs.heldCount() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestBridgedCallsFirstRoundIsCurrentFromTheStart: what a server sends as
// soon as a bridged call starts (a log message, progress) goes to the
// first round even when it is read before that round begins waiting for
// the server (here the server call runs to its end before). It used to be
// dropped, as if the call were parked, whenever the round's goroutine lagged.
func TestBridgedCallsFirstRoundIsCurrentFromTheStart(t *testing.T) {
	b := newInputBridge(InputRequestsConfig{}, slog.New(slog.DiscardHandler))
	first := &mcp.ServerSession{}
	ctx := context.WithValue(context.Background(), requestMetaKey{}, requestMeta{session: first, modern: true, requestID: "1"})
	var round requestMeta
	var current bool
	res, asked, _, err := b.call(ctx, policy.Principal{ID: "alice"}, bridgedRequest{method: "tools/call", name: "t"}, &relayedCounter{},
		func(serverCall func()) bool { serverCall(); return true },
		func(ctx context.Context) (mcp.Result, error) {
			// Where the relay sends what the server notifies now.
			round, current = requestMetaFrom(ctx).now()
			return &mcp.CallToolResult{}, nil
		})
	require.NoError(t, err)
	assert.Nil(t, asked)
	assert.NotNil(t, res)
	require.True(t, current, "the first round is current from the start")
	assert.Same(t, first, round.session)
	assert.Zero(t, b.heldCount())
}

// TestCompleteResultKeepsEverything: a result marked complete for a
// 2026-07-28 client says so on the wire and keeps everything else it had;
// the SDK's result types have no unexported field the copy would lose.
func TestCompleteResultKeepsEverything(t *testing.T) {
	unexported := func(v any) []string {
		var names []string
		for f := range reflect.TypeOf(v).Elem().Fields() {
			if !f.IsExported() {
				names = append(names, f.Name)
			}
		}
		return names
	}
	check := func(res mcp.Result, marked mcp.Result) {
		t.Helper()
		before, err := json.Marshal(res)
		require.NoError(t, err)
		after, err := json.Marshal(marked)
		require.NoError(t, err)
		var want, got map[string]any
		require.NoError(t, json.Unmarshal(before, &want))
		require.NoError(t, json.Unmarshal(after, &got))
		assert.NotContains(t, want, "resultType")
		want["resultType"] = "complete"
		assert.Equal(t, want, got)
	}

	failed := errors.New("tool failed")
	call := &mcp.CallToolResult{Meta: mcp.Meta{"k": "v"}, Content: []mcp.Content{&mcp.TextContent{Text: "t"}},
		StructuredContent: map[string]any{"n": 1}, RequestState: "s"}
	call.SetError(failed)
	marked := completeResult(call)
	check(call, marked)
	assert.Equal(t, failed, marked.GetError())
	assert.Equal(t, []string{"resultType", "err"}, unexported(call))

	prompt := &mcp.GetPromptResult{Description: "d", Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "m"}}}}
	check(prompt, completeResult(prompt))
	assert.Equal(t, []string{"resultType"}, unexported(prompt))

	read := &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "u", Text: "x"}}}
	check(read, completeResult(read))
	assert.Equal(t, []string{"resultType"}, unexported(read))

	var none *mcp.CallToolResult
	assert.Nil(t, completeResult(none))
}
