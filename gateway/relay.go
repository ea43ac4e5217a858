package gateway

import (
	"bytes"
	"context"
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
)

// callRegistry holds the downstream requests in flight on one upstream, so
// that what the server sends while serving them — progress, log messages,
// sampling and elicitation requests — reaches the downstream client that
// made the request, and no other.
type callRegistry struct {
	mu    sync.Mutex
	next  uint64
	calls map[string]requestMeta // gateway progress token → downstream request
}

// begin registers a downstream request and returns the gateway-unique id
// that stands for its progress token upstream.
func (r *callRegistry) begin(m requestMeta) (id string, done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]requestMeta{}
	}
	r.next++
	id = "mcp-warden-" + strconv.FormatUint(r.next, 10)
	r.calls[id] = m
	return id, func() {
		r.mu.Lock()
		delete(r.calls, id)
		r.mu.Unlock()
	}
}

// progress maps the gateway's token back to the client's and forwards the
// notification to the client's session.
func (r *callRegistry) progress(ctx context.Context, p *mcp.ProgressNotificationParams) {
	id, _ := p.ProgressToken.(string)
	r.mu.Lock()
	m, ok := r.calls[id]
	r.mu.Unlock()
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

// caller is the one downstream request a message from the server belongs
// to. The protocol does not tie log messages and legacy server→client
// requests to a request, so they are routed only when every request in
// flight on this upstream comes from the same client session.
func (r *callRegistry) caller() (requestMeta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found requestMeta
	for _, m := range r.calls {
		switch {
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

func (r *callRegistry) log(ctx context.Context, p *mcp.LoggingMessageParams) {
	m, ok := r.caller()
	if ok {
		m, ok = m.now()
	}
	if ok {
		_ = m.session.Log(m.context(ctx), p)
	}
}

var errNoCaller = errors.New("mcp-warden: no single client request in flight to relay this request to")

func (r *callRegistry) createMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	m, ok := r.caller()
	if !ok {
		return nil, errNoCaller
	}
	if m.bridge != nil {
		return askBridged[*mcp.CreateMessageResult](ctx, m.bridge, "sampling/createMessage", p)
	}
	return m.session.CreateMessage(m.context(ctx), p)
}

func (r *callRegistry) elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	m, ok := r.caller()
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
func (r *callRegistry) listRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	m, ok := r.caller()
	if ok && m.bridge != nil {
		if p == nil {
			p = &mcp.ListRootsParams{}
		}
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

// countingTransport counts the relayed notifications read from the server,
// in the order the server sent them, so that a request's result can wait
// for the notifications sent before it. It wraps stdio and HTTP+SSE
// connections; a streamable-HTTP connection must stay the SDK's own (the
// SDK tells it the negotiated version and starts its GET stream through an
// unexported method a wrapper would hide), so there countingHTTP counts in
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

// countingHTTP counts the relayed notifications in the SSE responses of a
// streamable-HTTP server as the SDK reads them, which is before it reads
// them as messages: a result waits for them all the same.
type countingHTTP struct {
	next    http.RoundTripper
	relayed *relayedCounter
}

func (t countingHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.Body != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &countingBody{ReadCloser: resp.Body, relayed: t.relayed}
	}
	return resp, err
}

// countingBody scans an SSE stream line by line for data lines holding a
// relayed notification.
type countingBody struct {
	io.ReadCloser
	relayed *relayedCounter
	line    []byte // the incomplete last line read so far
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	data := p[:n]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			b.line = append(b.line, data...)
			break
		}
		b.countLine(append(b.line, data[:i]...))
		b.line, data = b.line[:0], data[i+1:]
	}
	return n, err
}

func (b *countingBody) countLine(line []byte) {
	payload, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if !ok {
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(bytes.TrimSpace(payload), &msg) == nil && msg.ID == nil && relayedMethods[msg.Method] {
		b.relayed.add()
	}
}
