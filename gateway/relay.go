package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

// callRegistry holds the downstream requests in flight on one upstream, so
// that what the server sends while serving them — progress, log messages,
// sampling and elicitation requests — reaches the downstream client that
// made the request, and no other.
//
// Each call is held with the process it was sent to: a stdio server that
// speaks both eras runs as two processes, one per link, and a message from
// one of them belongs to a call on that process only. A remote server is
// one server behind both its links: its calls are held with no process
// (nil), and a message from either link may be any of them.
type callRegistry struct {
	// streamKey names the _meta member in which the upstream's
	// streamable-HTTP transport marks a server request with the call whose
	// response stream carried it (streamHTTP). It is random per upstream
	// and never leaves the gateway, so a server cannot forge the mark.
	streamKey string

	mu    sync.Mutex
	next  uint64
	calls map[string]callInFlight // gateway progress token → downstream request
	ended time.Time               // when the last call ended
}

// callInFlight is a downstream request in flight upstream, and the
// process serving it (nil for a remote server).
type callInFlight struct {
	requestMeta
	proc *sandbox.Process
}

// newStreamKey is the random name of an upstream's stream mark.
func newStreamKey() string {
	return "mcp-warden.stream." + rand.Text()
}

// streamCallKey is the context key under which forward passes the id of the
// call it sends to the HTTP transport (see streamHTTP).
type streamCallKey struct{}

// begin registers a downstream request sent to proc (nil: a remote
// server) and returns the id, unique on the upstream, that stands for its
// progress token upstream.
func (r *callRegistry) begin(m requestMeta, proc *sandbox.Process) (id string, done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]callInFlight{}
	}
	r.next++
	id = "mcp-warden-" + strconv.FormatUint(r.next, 10)
	r.calls[id] = callInFlight{requestMeta: m, proc: proc}
	return id, func() {
		r.mu.Lock()
		delete(r.calls, id)
		r.ended = time.Now()
		r.mu.Unlock()
	}
}

// lastDone is when the last request in flight ended (zero: none has).
func (r *callRegistry) lastDone() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// inFlight reports whether any request is in flight.
func (r *callRegistry) inFlight() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls) > 0
}

// call is the request in flight under id that proc (nil: a remote
// server) is serving: a process cannot name another's calls.
func (r *callRegistry) call(id string, proc *sandbox.Process) (requestMeta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.calls[id]
	return c.requestMeta, ok && c.proc == proc
}

// progress maps the gateway's token back to the client's and forwards the
// notification, sent by proc (nil: a remote server), to the client's
// session.
func (r *callRegistry) progress(ctx context.Context, p *mcp.ProgressNotificationParams, proc *sandbox.Process) {
	id, _ := p.ProgressToken.(string)
	m, ok := r.call(id, proc)
	if ok {
		m, ok = m.now()
	}
	if !ok || m.session == nil || m.progressToken == nil {
		return
	}
	q := *p
	q.ProgressToken = m.progressToken
	_ = m.session.NotifyProgress(m.context(ctx), &q)
}

// requester is the downstream request a server's request or log message
// (with params p), sent by proc (nil: a remote server), belongs to. A
// streamable-HTTP server's message sent on the response stream of a call
// is that call's (the transport ties it to the call; streamHTTP marks it,
// and the mark is removed here, before the message goes on to the
// client); one whose call has ended belongs to none. Other messages say
// nothing of the call they are for: see caller.
//
// p must not be a nil pointer.
func (r *callRegistry) requester(p mcp.Params, proc *sandbox.Process) (requestMeta, bool) {
	meta := p.GetMeta()
	id, marked := meta[r.streamKey]
	if !marked {
		return r.caller(proc)
	}
	delete(meta, r.streamKey)
	if len(meta) == 0 {
		p.SetMeta(nil)
	}
	s, _ := id.(string)
	m, ok := r.call(s, proc)
	return m, ok && m.session != nil
}

// caller is the one downstream request a message from proc (nil: a remote
// server) belongs to. The protocol does not tie log messages and legacy
// server→client requests sent outside a call's response stream to a
// request, so they are routed only when every request in flight on that
// process (on a remote server: on either link) comes from the same client
// session.
func (r *callRegistry) caller(proc *sandbox.Process) (requestMeta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found requestMeta
	for _, c := range r.calls {
		if c.proc != proc {
			continue
		}
		switch m := c.requestMeta; {
		case m.session == nil:
			return requestMeta{}, false
		case found.session == nil:
			found = m
		case found.client() != m.client():
			return requestMeta{}, false
		}
	}
	return found, found.session != nil
}

// client is who a request in flight is for: the downstream session, or
// for a bridged call (whose rounds arrive in sessions of their own) the
// call.
func (m requestMeta) client() any {
	if m.bridge != nil {
		return m.bridge
	}
	return m.session
}

// now is the downstream request a message of the server's goes to: for a
// bridged call, the round being answered (none while the call waits for
// the client's retry).
func (m requestMeta) now() (requestMeta, bool) {
	if m.bridge != nil {
		return m.bridge.current()
	}
	return m, true
}

// log relays a log message from proc (nil: a remote server) to the client
// of the call it belongs to (see requester), at that client's level; with
// no such call it is dropped.
func (r *callRegistry) log(ctx context.Context, p *mcp.LoggingMessageParams, proc *sandbox.Process) {
	m, ok := r.requester(p, proc)
	if ok {
		m, ok = m.now()
	}
	if ok {
		_ = m.session.Log(m.context(ctx), p)
	}
}

var errNoCaller = errors.New("mcp-warden: no single client request in flight to relay this request to")

func (r *callRegistry) createMessage(ctx context.Context, p *mcp.CreateMessageParams, proc *sandbox.Process) (*mcp.CreateMessageResult, error) {
	m, ok := r.requester(p, proc)
	if !ok {
		return nil, errNoCaller
	}
	if m.bridge != nil {
		return askBridged[*mcp.CreateMessageResult](ctx, m.bridge, "sampling/createMessage", p)
	}
	return m.session.CreateMessage(m.context(ctx), p)
}

func (r *callRegistry) elicit(ctx context.Context, p *mcp.ElicitParams, proc *sandbox.Process) (*mcp.ElicitResult, error) {
	m, ok := r.requester(p, proc)
	if !ok {
		return nil, errNoCaller
	}
	if m.bridge != nil {
		return askBridged[*mcp.ElicitResult](ctx, m.bridge, "elicitation/create", p)
	}
	return m.session.Elicit(m.context(ctx), p)
}

// listRoots answers the server's roots/list with the roots of the client
// whose call it is serving, asked afresh: roots are the client's to give,
// and only to the server working for it (a 2026-07-28 client's tools/call
// is asked through an input_required result, see bridge.go). With no
// single client call in flight, or another 2026-07-28 request (which is
// never sent server→client requests), the gateway answers for itself: it
// has no roots. A client that declared no roots capability gets the server
// the error the spec prescribes for such a client: method not found.
func (r *callRegistry) listRoots(ctx context.Context, p *mcp.ListRootsParams, proc *sandbox.Process) (*mcp.ListRootsResult, error) {
	if p == nil { // roots/list may come without params
		p = &mcp.ListRootsParams{}
	}
	m, ok := r.requester(p, proc)
	if ok && m.bridge != nil {
		return askBridged[*mcp.ListRootsResult](ctx, m.bridge, "roots/list", p)
	}
	if !ok || m.modern {
		return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
	}
	if init := m.session.InitializeParams(); init == nil || init.Capabilities == nil || init.Capabilities.RootsV2 == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client does not support roots"}
	}
	return m.session.ListRoots(m.context(ctx), p)
}

// context is ctx (the upstream's request, whose cancellation must reach the
// client) carrying the values of the downstream request's context (which
// the SDK reads to route the message onto the right stream).
func (m requestMeta) context(ctx context.Context) context.Context {
	if m.ctx == nil {
		return ctx
	}
	return valuesFrom{Context: ctx, values: m.ctx}
}

type valuesFrom struct {
	context.Context
	values context.Context
}

func (c valuesFrom) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// inflightCounter counts forwarded requests, so that shutdown can wait for
// them to finish.
type inflightCounter struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0; nil means idle
}

func (c *inflightCounter) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
}

func (c *inflightCounter) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.idle)
		c.idle = nil
	}
}

// wait returns when no request is in flight or ctx ends.
func (c *inflightCounter) wait(ctx context.Context) {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// relayedMethods are the notifications a countingTransport counts: those
// relayed to the client of a request in flight.
var relayedMethods = map[string]bool{"notifications/message": true, "notifications/progress": true}

// streamRoutedNotifications are the relayed notifications that name no
// request of their own (progress has its token), so that on a
// streamable-HTTP upstream they are marked with the call whose response
// stream carried them, as server requests are (sseBody).
var streamRoutedNotifications = map[string]bool{"notifications/message": true}

// countingTransport counts the relayed notifications read from the server,
// in the order the server sent them, so that a request's result can wait
// for the notifications sent before it. It wraps stdio and HTTP+SSE
// connections; a streamable-HTTP connection must stay the SDK's own (the
// SDK tells it the negotiated version and starts its GET stream through an
// unexported method a wrapper would hide), so there streamHTTP counts in
// the response bodies instead.
type countingTransport struct {
	mcp.Transport
	relayed *relayedCounter
}

func (t countingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{Connection: c, relayed: t.relayed}, nil
}

type countingConn struct {
	mcp.Connection
	relayed *relayedCounter
}

func (c countingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && !req.IsCall() && relayedMethods[req.Method] {
		c.relayed.add()
	}
	return msg, err
}

// relayWait bounds how long a result waits for notifications to relay.
const relayWait = time.Second

// relayedCounter counts notifications read and not yet relayed.
type relayedCounter struct{ inflightCounter }

func (c *relayedCounter) wait(ctx context.Context) {
	c.mu.Lock()
	idle := c.idle == nil
	c.mu.Unlock()
	if idle { // the common case: no timer to arm
		return
	}
	ctx, cancel := context.WithTimeout(ctx, relayWait)
	defer cancel()
	c.inflightCounter.wait(ctx)
}

// streamHTTP reads a streamable-HTTP server's SSE responses as the SDK
// reads them (before it reads them as messages), for two things the SDK
// does not keep: it counts the relayed notifications, so that a result
// waits for them; and it marks each server request and log message that
// arrives on the response stream of a call with that call's id (from the
// request's context, see forward), under the upstream's secret key in the
// message's _meta: the transport ties such a message to the call (the SDK
// merges all streams into one), and callRegistry.requester routes it there.
type streamHTTP struct {
	next    http.RoundTripper
	relayed *relayedCounter
	key     string // callRegistry.streamKey
}

func (t streamHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.Body != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		call, _ := r.Context().Value(streamCallKey{}).(string)
		resp.Body = &sseBody{ReadCloser: resp.Body, relayed: t.relayed, key: t.key, call: call}
	}
	return resp, err
}

// sseBody passes an SSE stream on line by line, byte for byte, counting
// the data lines that hold a relayed notification and marking those that
// hold a server request or a stream-routed notification with call, if set
// (the stream answers that call).
type sseBody struct {
	io.ReadCloser
	relayed   *relayedCounter
	key, call string
	buf       [4096]byte
	line      []byte // the incomplete last line read so far
	out       []byte // lines passed on; out[read:] are not yet read
	read      int
	err       error // the stream's error, returned once out is read
}

func (b *sseBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 && b.err == nil {
		n, err := b.ReadCloser.Read(b.buf[:])
		for data := b.buf[:n]; len(data) > 0; {
			// SSE lines end in CR, LF or CRLF; the LF of a CRLF passes
			// as an empty line of its own.
			i := bytes.IndexAny(data, "\r\n")
			if i < 0 {
				b.line = append(b.line, data...)
				break
			}
			b.line = append(b.line, data[:i]...)
			b.out = append(b.passLine(b.out, b.line), data[i])
			b.line, data = b.line[:0], data[i+1:]
		}
		if err != nil {
			b.out, b.line, b.err = append(b.out, b.line...), nil, err
		}
	}
	n := copy(p, b.out[b.read:])
	if b.read += n; b.read < len(b.out) {
		return n, nil
	}
	b.out, b.read = b.out[:0], 0
	return n, b.err
}

// passLine appends line (without its end) to out as it is passed on.
func (b *sseBody) passLine(out, line []byte) []byte {
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return append(out, line...)
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(payload, &msg) != nil {
		return append(out, line...)
	}
	notification := msg.ID == nil && msg.Method != ""
	if notification && relayedMethods[msg.Method] {
		b.relayed.add()
	}
	if b.call != "" && (msg.ID != nil && msg.Method != "" || notification && streamRoutedNotifications[msg.Method]) {
		if marked, err := withMetaMember(payload, b.key, b.call); err == nil {
			return append(append(out, "data: "...), marked...)
		}
		// A message the SDK cannot read either stays unmarked, for the
		// SDK to refuse (a request) or drop (a notification).
	}
	return append(out, line...)
}

// withMetaMember is the JSON-RPC request or notification msg with
// params._meta[key] set to value; everything else is kept as it is.
func withMetaMember(msg []byte, key, value string) ([]byte, error) {
	var req, params, meta map[string]json.RawMessage
	if err := json.Unmarshal(msg, &req); err != nil {
		return nil, err
	}
	if raw := req["params"]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, err
		}
	}
	if raw := params["_meta"]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
	}
	if params == nil {
		params = map[string]json.RawMessage{}
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	var err error
	if meta[key], err = json.Marshal(value); err != nil {
		return nil, err
	}
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	if req["params"], err = json.Marshal(params); err != nil {
		return nil, err
	}
	return json.Marshal(req)
}
