package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// readSSEBody reads stream through an sseBody of call (none: "") marking
// under key, cut one byte and half a read at a time; it returns what came
// out and the relayed notifications counted.
func readSSEBody(t *testing.T, stream, key, call string) (string, *relayedCounter) {
	t.Helper()
	relayed := &relayedCounter{}
	body := &sseBody{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))), relayed: relayed, key: key, call: call}
	out, err := io.ReadAll(iotest.HalfReader(body))
	require.NoError(t, err)
	return string(out), relayed
}

// TestSSEBodyMarksTheRequestsOfItsCall: the SSE response of a call passes
// byte for byte, however it is cut, except that the server's requests on
// it carry the call's id under the stream key, beside the _meta they had;
// relayed notifications are counted; a stream of no call is not marked.
func TestSSEBodyMarksTheRequestsOfItsCall(t *testing.T) {
	const key = "mcp-warden.stream.K"
	stream := "event: message\r\nid: 1\r\n" +
		`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}` + "\r\n\r\n" +
		`data: {"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"_meta":{"x":1},"message":"ok? <yes>","requestedSchema":{"type":"object"}}}` + "\n\n" +
		`data: {"jsonrpc":"2.0","id":8,"method":"roots/list"}` + "\r\r" +
		`data: {"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"9007199254740993"}]}}` + "\n\n" +
		": a comment\n" + "data: not json"

	read := func(call string) (string, *relayedCounter) { return readSSEBody(t, stream, key, call) }

	unmarked, relayed := read("")
	assert.Equal(t, stream, unmarked)
	assert.Equal(t, 1, relayed.n)

	marked, relayed := read("mcp-warden-42")
	assert.Equal(t, 1, relayed.n)
	lines := strings.FieldsFunc(marked, func(r rune) bool { return r == '\r' || r == '\n' })
	require.Len(t, lines, 8)
	params := func(line string) map[string]any {
		var msg struct{ Params map[string]any }
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &msg))
		return msg.Params
	}
	elicit := params(lines[3])
	assert.Equal(t, map[string]any{key: "mcp-warden-42", "x": float64(1)}, elicit["_meta"])
	assert.Equal(t, "ok? <yes>", elicit["message"])
	assert.Equal(t, map[string]any{"_meta": map[string]any{key: "mcp-warden-42"}}, params(lines[4]))
	// Everything but the two requests passes as it came.
	for _, i := range []int{3, 4} {
		lines[i] = ""
	}
	for _, line := range lines {
		if line != "" {
			assert.Contains(t, stream, line)
		}
	}
	assert.Contains(t, marked, "\"9007199254740993\"}]}}\n\n: a comment\ndata: not json")
}

// TestSSEBodyMarksTheLogMessagesOfItsCall: log messages on a call's
// response stream carry the call's id under the stream key, as its
// requests do, and are counted; progress (routed by its token) and other
// notifications pass as they came; on a stream of no call nothing is
// marked.
func TestSSEBodyMarksTheLogMessagesOfItsCall(t *testing.T) {
	const key = "mcp-warden.stream.K"
	logged := `data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"l","data":{"n":9007199254740993}}}` + "\n\n"
	metaLogged := `data: {"jsonrpc":"2.0","method":"notifications/message","params":{"_meta":{"x":"y"},"level":"error","data":"boom"}}` + "\r\n\r\n"
	progress := `data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}` + "\n\n"
	updated := `data: {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"u"}}` + "\n\n"
	stream := logged + progress + metaLogged + updated

	read := func(call string) (string, *relayedCounter) { return readSSEBody(t, stream, key, call) }
	unmarked, relayed := read("")
	assert.Equal(t, stream, unmarked)
	assert.Equal(t, 3, relayed.n, "both log messages and the progress")

	marked, relayed := read("mcp-warden-7")
	assert.Equal(t, 3, relayed.n)
	var params []map[string]any
	for line := range strings.FieldsFuncSeq(marked, func(r rune) bool { return r == '\r' || r == '\n' }) {
		var msg struct{ Params map[string]any }
		d := json.NewDecoder(strings.NewReader(strings.TrimPrefix(line, "data: ")))
		d.UseNumber()
		require.NoError(t, d.Decode(&msg))
		params = append(params, msg.Params)
	}
	require.Len(t, params, 4)
	assert.Equal(t, map[string]any{"_meta": map[string]any{key: "mcp-warden-7"}, "level": "info", "logger": "l",
		"data": map[string]any{"n": json.Number("9007199254740993")}}, params[0])
	assert.Equal(t, map[string]any{"_meta": map[string]any{key: "mcp-warden-7", "x": "y"}, "level": "error", "data": "boom"}, params[2])
	assert.Contains(t, marked, progress, "progress is routed by its token")
	assert.Contains(t, marked, updated)
	assert.NotContains(t, marked, logged)
}

// TestLogMessagesGoToTheCallOfTheirStream: a marked log message belongs to
// the call it is marked with, whoever else has calls in flight, and to no
// one once that call has ended (not to the single caller left); the mark
// is removed. An unmarked one goes to a single caller only.
func TestLogMessagesGoToTheCallOfTheirStream(t *testing.T) {
	r := &callRegistry{streamKey: "mcp-warden.stream.K"}
	alice, bob := &mcp.ServerSession{}, &mcp.ServerSession{}
	alices, endAlices := r.begin(requestMeta{session: alice, requestID: "a"}, nil)
	_, endBobs := r.begin(requestMeta{session: bob, requestID: "b"}, nil)
	defer endBobs()

	marked := func(id string) *mcp.LoggingMessageParams {
		return &mcp.LoggingMessageParams{Meta: mcp.Meta{r.streamKey: id}, Level: "info", Data: "d"}
	}
	p := marked(alices)
	m, ok := r.requester(p, nil)
	require.True(t, ok)
	assert.Equal(t, "a", m.requestID)
	assert.Nil(t, p.Meta, "the mark does not reach the client")
	kept := &mcp.LoggingMessageParams{Meta: mcp.Meta{r.streamKey: alices, "x": "y"}}
	_, ok = r.requester(kept, nil)
	require.True(t, ok)
	assert.Equal(t, mcp.Meta{"x": "y"}, kept.Meta)

	_, ok = r.requester(&mcp.LoggingMessageParams{Level: "info"}, nil)
	assert.False(t, ok, "unmarked with two clients' calls in flight: dropped")

	endAlices()
	p = marked(alices)
	_, ok = r.requester(p, nil)
	assert.False(t, ok, "its call has ended: dropped, not given to bob")
	assert.Nil(t, p.Meta)
	_, ok = r.requester(&mcp.LoggingMessageParams{Meta: mcp.Meta{r.streamKey: 7}}, nil)
	assert.False(t, ok, "a mark that is no call's string")
	m, ok = r.requester(&mcp.LoggingMessageParams{Level: "info"}, nil)
	require.True(t, ok, "unmarked with one client's call in flight")
	assert.Same(t, bob, m.session)
}

// TestMessagesOfAProcessGoToItsOwnCalls: a stdio server that speaks both
// eras is two processes sharing one registry (one progress token count):
// an unmarked message from one process goes to the single client of the
// calls in flight on that process, whoever has calls on the other, and is
// dropped when two clients have calls there; a process's progress reaches
// only its own calls, even under another's token. A remote server's
// messages (no process) count the calls on both its links.
func TestMessagesOfAProcessGoToItsOwnCalls(t *testing.T) {
	var r callRegistry
	legacy, modern := &sandbox.Process{}, &sandbox.Process{}
	alice, bob, carol := &mcp.ServerSession{}, &mcp.ServerSession{}, &mcp.ServerSession{}
	alices, endAlices := r.begin(requestMeta{session: alice, requestID: "a"}, legacy)
	defer endAlices()
	bobs, endBobs := r.begin(requestMeta{session: bob, requestID: "b", modern: true}, modern)
	assert.NotEqual(t, alices, bobs, "progress tokens are unique on the upstream")

	unmarked := func() *mcp.LoggingMessageParams { return &mcp.LoggingMessageParams{Level: "info"} }
	m, ok := r.requester(unmarked(), legacy)
	require.True(t, ok, "alice's is the only call on the legacy process")
	assert.Same(t, alice, m.session)
	m, ok = r.requester(unmarked(), modern)
	require.True(t, ok, "bob's is the only call on the modern process")
	assert.Same(t, bob, m.session)
	_, ok = r.call(bobs, legacy)
	assert.False(t, ok, "the legacy process cannot name bob's call")
	m, ok = r.call(bobs, modern)
	require.True(t, ok)
	assert.Same(t, bob, m.session)

	_, endCarols := r.begin(requestMeta{session: carol, requestID: "c"}, legacy)
	_, ok = r.requester(unmarked(), legacy)
	assert.False(t, ok, "two clients' calls on the legacy process")
	m, ok = r.requester(unmarked(), modern)
	require.True(t, ok, "the modern process still has one caller")
	assert.Same(t, bob, m.session)
	endCarols()
	endBobs()
	_, ok = r.requester(unmarked(), modern)
	assert.False(t, ok, "no call in flight on the modern process")

	// Over HTTP both links are one server's: its messages see every call.
	var remote callRegistry
	_, endAlices = remote.begin(requestMeta{session: alice, requestID: "a"}, nil)
	defer endAlices()
	_, endBobs = remote.begin(requestMeta{session: bob, requestID: "b", modern: true}, nil)
	_, ok = remote.requester(unmarked(), nil)
	assert.False(t, ok, "two clients' calls on one remote server")
	endBobs()
	m, ok = remote.requester(unmarked(), nil)
	require.True(t, ok)
	assert.Same(t, alice, m.session)
}

// hearing records the log messages (their data) each client is sent.
type hearing struct {
	mu    sync.Mutex
	heard map[string][]string
}

// handler records the log messages client who is sent; none may carry
// the gateway's mark.
func (h *hearing) handler(t *testing.T, who string) func(context.Context, *mcp.LoggingMessageRequest) {
	return func(_ context.Context, req *mcp.LoggingMessageRequest) {
		assert.Empty(t, req.Params.Meta, "the gateway's mark does not reach the client")
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.heard == nil {
			h.heard = map[string][]string{}
		}
		h.heard[who] = append(h.heard[who], fmt.Sprint(req.Params.Data))
	}
}

// of is what who has been sent so far.
func (h *hearing) of(who string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.heard[who])
}

// await waits until who has been sent n log messages (the client SDK hands
// them to its handler on a goroutine of its own) and returns them.
func (h *hearing) await(t *testing.T, who string, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(h.of(who)) >= n }, 5*time.Second, 10*time.Millisecond,
		"%s hears %d log messages; got %v", who, n, h.of(who))
	return h.of(who)
}

// listener connects a 2025-11-25 client as token (with opts, which may be
// nil) at log level info, whose log messages h records under who.
func (h *hearing) listener(t *testing.T, ctx context.Context, url, token, who string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	if opts == nil {
		opts = &mcp.ClientOptions{}
	}
	opts.LoggingMessageHandler = h.handler(t, who)
	cs := legacyClient(t, ctx, url, token, opts)
	require.NoError(t, cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))
	return cs
}

// atOnce calls tool as each of callers at once, with data(who) as its text,
// and requires every call to answer "noted" (the asker's note tool: the
// server sends each call's log message while all of them are in flight).
// meta is the _meta of each call (a 2026-07-28 client's log level), if
// any; more are arguments every call is given besides.
func atOnce(t *testing.T, ctx context.Context, tool string, callers map[string]*mcp.ClientSession, data func(who string) string,
	meta func(who string) mcp.Meta, more map[string]any) {
	t.Helper()
	var wg sync.WaitGroup
	for who, cs := range callers {
		args := map[string]any{"text": data(who), "together": len(callers)}
		maps.Copy(args, more)
		params := &mcp.CallToolParams{Name: tool, Arguments: args}
		if meta != nil {
			params.Meta = meta(who)
		}
		wg.Go(func() {
			res, err := cs.CallTool(ctx, params)
			if assert.NoError(t, err) {
				assert.Equal(t, "noted", text(t, res))
			}
		})
	}
	wg.Wait()
}

// TestE2ELogMessagesOfAnHTTPServerReachTheirOwnCall: a streamable-HTTP
// server of the 2025-11-25 era sends the log messages of a call on that
// call's response stream, so with two principals' calls in flight on it at
// once, each client receives its own call's log message, without the
// gateway's mark, and at its own level; the same calls on a stdio server,
// whose log messages say nothing of their call, have theirs dropped, as do
// the calls whose HTTP server sends their log messages on its standalone
// GET stream, unless one client's calls are all that is in flight.
func TestE2ELogMessagesOfAnHTTPServerReachTheirOwnCall(t *testing.T) {
	_, url, _, _ := askerRemoteAndLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var h hearing
	both := map[string]*mcp.ClientSession{"alice": h.listener(t, ctx, url, aliceToken, "alice", nil),
		"bob": h.listener(t, ctx, url, bobToken, "bob", nil)}
	// together calls tool as alice and bob at once; the server sends each
	// call's log message while both are in flight.
	together := func(tool, round string) {
		t.Helper()
		atOnce(t, ctx, tool, both, func(who string) string { return who + " " + round }, nil, nil)
	}

	together("local__note", "over stdio")
	together("remote__note", "over HTTP")
	// A log message misrouted or let through over stdio would have come
	// before these.
	assert.Equal(t, []string{"alice over HTTP"}, h.await(t, "alice", 1), "each client hears its own call")
	assert.Equal(t, []string{"bob over HTTP"}, h.await(t, "bob", 1))

	// Each client's level still filters what it is sent.
	require.NoError(t, both["bob"].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "error"}))
	together("remote__note", "again")
	assert.Equal(t, []string{"alice over HTTP", "alice again"}, h.await(t, "alice", 2))
	assert.Equal(t, []string{"bob over HTTP"}, h.of("bob"))

	// Sent on the standalone GET stream, a log message says nothing of its
	// call: with both clients' calls in flight it is dropped, with alice's
	// alone it reaches her.
	require.NoError(t, both["bob"].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))
	aside := map[string]any{"aside": true}
	atOnce(t, ctx, "remote__note", both, func(who string) string { return who + " aside" }, nil, aside)
	atOnce(t, ctx, "remote__note", map[string]*mcp.ClientSession{"alice": both["alice"]}, func(string) string { return "alice alone aside" }, nil, aside)
	assert.Equal(t, []string{"alice over HTTP", "alice again", "alice alone aside"}, h.await(t, "alice", 3))
	assert.Equal(t, []string{"bob over HTTP"}, h.of("bob"))
}

// TestE2ELogMessagesOfAModernHTTPServerReachTheirOwnCall: a streamable-HTTP
// server that speaks 2026-07-28 (linked twice, once per era) sends a
// call's log messages on that call's response stream in either era, so
// with two principals' calls in flight on it at once each client receives
// its own call's log message, at its own level: two 2026-07-28 clients
// (their calls over the modern link, their level in each request's _meta),
// and a 2026-07-28 client beside a 2025-11-25 one (whose call goes over
// the legacy link).
func TestE2ELogMessagesOfAModernHTTPServerReachTheirOwnCall(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	remote := startOnFreePort(t, func(addr string) *exec.Cmd { return exec.Command(asker, "-http", addr, "-modern") })
	_, url, _, _ := askerServersGateway(t, InputRequestsConfig{},
		ServerConfig{Name: "modern", URL: "http://" + remote + "/mcp", AllowPrivateNetwork: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var h hearing
	modern := func(token, who string) *mcp.ClientSession {
		return modernClient(t, ctx, url, token, &mcp.ClientOptions{LoggingMessageHandler: h.handler(t, who)})
	}
	alice, bob := modern(aliceToken, "alice"), modern(bobToken, "bob")
	carol := h.listener(t, ctx, url, bobToken, "carol", nil)
	levels := map[string]mcp.LoggingLevel{"alice": "info", "bob": "info"}
	level := func(who string) mcp.Meta {
		if levels[who] == "" {
			return nil
		}
		return mcp.Meta{mcp.MetaKeyLogLevel: levels[who]}
	}
	together := func(round string, callers map[string]*mcp.ClientSession) {
		t.Helper()
		atOnce(t, ctx, "note", callers, func(who string) string { return who + " " + round }, level, nil)
	}

	together("modern", map[string]*mcp.ClientSession{"alice": alice, "bob": bob})
	assert.Equal(t, []string{"alice modern"}, h.await(t, "alice", 1), "each client hears its own call")
	assert.Equal(t, []string{"bob modern"}, h.await(t, "bob", 1))

	together("across eras", map[string]*mcp.ClientSession{"alice": alice, "carol": carol})
	assert.Equal(t, []string{"alice modern", "alice across eras"}, h.await(t, "alice", 2))
	assert.Equal(t, []string{"carol across eras"}, h.await(t, "carol", 1))

	// A request's level filters what its client is sent; without one a
	// go-sdk server sends none.
	levels["bob"], levels["alice"] = "error", ""
	together("filtered", map[string]*mcp.ClientSession{"alice": alice, "bob": bob, "carol": carol})
	assert.Equal(t, []string{"carol across eras", "carol filtered"}, h.await(t, "carol", 2))
	assert.Equal(t, []string{"alice modern", "alice across eras"}, h.of("alice"))
	assert.Equal(t, []string{"bob modern"}, h.of("bob"))
}

// TestE2ESingleCallerRuleOnStdioAndSSEServers: a stdio or HTTP+SSE server's
// requests and log messages say nothing of the call they are for, so
// they reach a client only while every call in flight on that server is
// that client's: with one client's call in flight its elicitation and log
// messages reach it; with two clients' calls in flight the server's
// sampling request is refused and the log messages of both calls are
// dropped, rather than shown to a client whose they may not be.
func TestE2ESingleCallerRuleOnStdioAndSSEServers(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	sse := startOnFreePort(t, func(addr string) *exec.Cmd { return exec.Command(asker, "-sse", addr) })
	_, url, _, _ := askerServersGateway(t, InputRequestsConfig{},
		ServerConfig{Name: "sse", URL: "http://" + sse + "/", Transport: RemoteSSE, AllowPrivateNetwork: true},
		ServerConfig{Name: "stdio", Command: asker})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var h hearing
	asked := make(chan string, 1)
	release := make(chan struct{})
	alice := h.listener(t, ctx, url, aliceToken, "alice", &mcp.ClientOptions{ElicitationHandler: heldElicitation(ctx, asked, release)})
	bob := h.listener(t, ctx, url, bobToken, "bob", &mcp.ClientOptions{
		CreateMessageHandler: unexpectedSampling(t, "bob is asked to sample while alice's call is in flight on the same server")})
	both := map[string]*mcp.ClientSession{"alice": alice, "bob": bob}

	heard := 0
	for _, server := range []string{"stdio", "sse"} {
		// One client in flight: its log message and elicitation reach it.
		atOnce(t, ctx, server+"__note", map[string]*mcp.ClientSession{"alice": alice}, func(string) string { return "alone on " + server }, nil, nil)
		heard++
		assert.Equal(t, "alone on "+server, h.await(t, "alice", heard)[heard-1])
		confirmed := confirmHeld(t, ctx, alice, server+"__confirm", "alice on "+server+"?", asked)

		// Alice's call is in flight (waiting for her answer): bob's call
		// has its sampling request refused.
		res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: server + "__sample", Arguments: map[string]any{"prompt": "bob?"}})
		require.NoError(t, err)
		assert.Contains(t, text(t, res), "no single client request in flight")
		release <- struct{}{}
		assert.Equal(t, "accept ok=true", <-confirmed)

		// Two clients in flight: both log messages are dropped.
		atOnce(t, ctx, server+"__note", both, func(who string) string { return who + " together on " + server }, nil, nil)
	}
	// A log message let through while both were in flight would have come
	// before the last ones.
	atOnce(t, ctx, "stdio__note", map[string]*mcp.ClientSession{"bob": bob}, func(string) string { return "bob alone" }, nil, nil)
	assert.Equal(t, []string{"bob alone"}, h.await(t, "bob", 1))
	assert.Equal(t, []string{"alone on stdio", "alone on sse"}, h.of("alice"))
}

// TestE2EEachProcessOfADualEraStdioServerHasItsOwnCallers: a stdio server
// that speaks both eras runs as two processes, one per link, and what one
// process sends says nothing of its call, so the single-caller rule counts
// the calls in flight on that process only. A 2025-11-25 client's call in
// flight on the legacy process does not keep the modern process's log
// message from the 2026-07-28 client whose call is the only one there, nor
// does that call keep the legacy process's log message and elicitation
// from the legacy client. Two clients' calls on one process still have
// their log messages dropped and the server's sampling refused.
func TestE2EEachProcessOfADualEraStdioServerHasItsOwnCallers(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	_, url, oplog, _ := askerServersGateway(t, InputRequestsConfig{}, ServerConfig{Name: "modern", Command: asker, Args: []string{"-modern"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var h hearing
	asked := make(chan string, 1)
	release := make(chan struct{})
	alice := h.listener(t, ctx, url, aliceToken, "alice", &mcp.ClientOptions{ElicitationHandler: heldElicitation(ctx, asked, release)})
	carol := h.listener(t, ctx, url, bobToken, "carol", &mcp.ClientOptions{
		CreateMessageHandler: unexpectedSampling(t, "carol is asked to sample while alice's call is in flight on the same process")})
	bob := modernClient(t, ctx, url, bobToken, &mcp.ClientOptions{LoggingMessageHandler: h.handler(t, "bob")})
	dave := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{LoggingMessageHandler: h.handler(t, "dave")})
	info := func(string) mcp.Meta { return mcp.Meta{mcp.MetaKeyLogLevel: "info"} }
	// confirm calls confirm as alice (on the legacy process) and returns
	// once the server's elicitation reached her; her call stays in flight
	// until release is sent, then answers on the channel returned.
	confirm := func(question string) <-chan string {
		t.Helper()
		return confirmHeld(t, ctx, alice, "confirm", question, asked)
	}

	// Alice's call is in flight on the legacy process; bob's, on the
	// modern one, sends its log message and stays in flight: bob hears it.
	confirmed := confirm("alice first?")
	holdCtx, stopHold := context.WithCancel(ctx)
	defer stopHold()
	held := make(chan error, 1)
	go func() {
		_, err := bob.CallTool(holdCtx, &mcp.CallToolParams{Name: "hold", Meta: info("bob"),
			Arguments: map[string]any{"text": "bob while alice waits"}})
		held <- err
	}()
	assert.Equal(t, []string{"bob while alice waits"}, h.await(t, "bob", 1), "the modern process's log message reaches its only caller")
	release <- struct{}{}
	assert.Equal(t, "accept ok=true", <-confirmed)

	// Bob's call is in flight on the modern process: the legacy process's
	// log message and elicitation reach alice, its only caller.
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"alice": alice}, func(string) string { return "alice while bob holds" }, nil, nil)
	assert.Equal(t, []string{"alice while bob holds"}, h.await(t, "alice", 1), "the legacy process's log message reaches its only caller")
	confirmed = confirm("alice second?")
	release <- struct{}{}
	assert.Equal(t, "accept ok=true", <-confirmed)
	stopHold()
	require.Error(t, <-held)
	require.Eventually(t, func() bool { return strings.Contains(oplog.String(), "hold cancelled") }, 10*time.Second, 10*time.Millisecond,
		"bob's call is cancelled on the modern process")

	// Two clients on one process: the single-caller rule. Carol's sampling
	// is refused while alice's call is in flight on the legacy process, and
	// both clients' log messages are dropped there; so are two 2026-07-28
	// clients' on the modern process.
	confirmed = confirm("alice third?")
	res, err := carol.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"prompt": "carol?"}})
	require.NoError(t, err)
	assert.Contains(t, text(t, res), "no single client request in flight")
	release <- struct{}{}
	assert.Equal(t, "accept ok=true", <-confirmed)
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"alice": alice, "carol": carol},
		func(who string) string { return who + " together on legacy" }, nil, nil)
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"bob": bob, "dave": dave},
		func(who string) string { return who + " together on modern" }, info, nil)

	// A log message let through while two clients were in flight would
	// have come before these.
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"carol": carol}, func(string) string { return "carol alone" }, nil, nil)
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"dave": dave}, func(string) string { return "dave alone" }, info, nil)
	assert.Equal(t, []string{"carol alone"}, h.await(t, "carol", 1))
	assert.Equal(t, []string{"dave alone"}, h.await(t, "dave", 1))
	assert.Equal(t, []string{"alice while bob holds"}, h.of("alice"))
	assert.Equal(t, []string{"bob while alice waits"}, h.of("bob"))
}

// confirmHeld calls tool (the asker's confirm) as cs with question on a
// goroutine of its own, and returns once the server's elicitation reached
// the client, whose handler sends its message on asked (heldElicitation);
// the call's answer comes on the channel returned once the client answers.
func confirmHeld(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool, question string, asked <-chan string) <-chan string {
	t.Helper()
	confirmed := make(chan string, 1)
	go func() {
		defer close(confirmed)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"question": question}})
		if assert.NoError(t, err) {
			confirmed <- text(t, res)
		}
	}()
	select {
	case got := <-asked:
		require.Equal(t, question, got)
	case <-ctx.Done():
		require.FailNow(t, "the client is not asked "+question)
	}
	return confirmed
}

// heldElicitation answers an elicitation by sending its message on asked
// and accepting only once release is closed (or the request or the test
// ends), so that the call that asked stays in flight meanwhile.
func heldElicitation(ctx context.Context, asked chan<- string, release <-chan struct{}) func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return func(rctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params.Message
		select {
		case <-release:
		case <-rctx.Done():
		case <-ctx.Done(): // the test failed: let the gateway close
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
	}
}

// unexpectedSampling fails the test with why if the server's sampling
// request reaches the client, and refuses it.
func unexpectedSampling(t *testing.T, why string) func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	return func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		t.Error(why)
		return nil, errors.New("unexpected")
	}
}
