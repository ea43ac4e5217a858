package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// inputBridge carries the server→client requests of a server that speaks
// only the legacy era (elicitation/create, sampling/createMessage,
// roots/list) to a 2026-07-28 client, which is never sent requests: the
// client's tools/call, prompts/get or resources/read is answered with an
// input_required result holding the server's requests, and the server's
// call is held open, waiting, until the client retries with its answers
// (see RATIONALE.md, "Input requests across eras").
//
// A held call is found again by its requestState, an unguessable token
// bound to the principal that made the call and to the request it made;
// it is cancelled on the server when the client does not come back within
// the timeout. The number of held calls is bounded per principal and in
// all.
type inputBridge struct {
	cfg    InputRequestsConfig
	logger *slog.Logger

	mu           sync.Mutex
	live         map[*bridgedCall]bool   // every bridged call whose server call runs
	parked       map[string]*bridgedCall // requestState → call waiting for the client's retry
	perPrincipal map[string]int          // principal identity → held calls
	held         int
	closed       bool
}

// bridgedRequest is what a held call was started for: its retries must
// repeat it exactly.
type bridgedRequest struct {
	method string // tools/call, prompts/get or resources/read
	name   string // the tool or prompt as the client named it, or the resource URI
	args   any    // the tool's or prompt's arguments; nil for a resource
}

// bridgedCall is one client request served over a legacy link for a
// 2026-07-28 client, across all the round trips it takes.
type bridgedCall struct {
	state     string // the requestState the client must send back
	principal string // principalIdentity of the caller
	request   bridgedRequest
	ctx       context.Context // the server call's; cancel ends it
	cancel    context.CancelFunc
	asks      chan *upstreamAsk       // the server's requests, as they come
	done      chan bridgedOutcome     // the server call's result; buffered
	relayed   *relayedCounter         // the link's notifications read and not yet relayed
	expiry    *time.Timer             // set while parked
	caps      *mcp.ClientCapabilities // what the client declared in the first round
	counted   bool                    // counted against the limits (guarded by inputBridge.mu)

	mu      sync.Mutex
	round   requestMeta             // the client request being answered now; zero while parked
	waiting map[string]*upstreamAsk // requests sent to the client, by input key
	keys    int
}

// upstreamAsk is one request of the server's, waiting for the client's
// answer.
type upstreamAsk struct {
	method  string
	request mcp.InputRequest
	answer  chan askAnswer // buffered
}

type askAnswer struct {
	res mcp.InputResponse
	err error
}

type bridgedOutcome struct {
	res mcp.Result
	err error
}

// errUnknownRequestState answers a retry whose requestState is unknown,
// expired, already used or another principal's, alike: the caller learns
// nothing about calls that are not its own.
var errUnknownRequestState = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown or expired requestState"}

// errHeldCallsExhausted is the server's answer when holding one more call
// would pass a limit.
var errHeldCallsExhausted = errors.New("mcp-warden: too many calls waiting for client input; retry later")

func newInputBridge(cfg InputRequestsConfig, logger *slog.Logger) *inputBridge {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultInputTimeout)
	cfg.MaxPerPrincipal = cmp.Or(cfg.MaxPerPrincipal, DefaultMaxHeldPerPrincipal)
	cfg.MaxHeld = cmp.Or(cfg.MaxHeld, DefaultMaxHeld)
	return &inputBridge{cfg: cfg, logger: logger, live: map[*bridgedCall]bool{},
		parked: map[string]*bridgedCall{}, perPrincipal: map[string]int{}}
}

// forwardBridged sends the downstream request in ctx upstream (call, given
// the instance of u that serves principal: see Gateway.instanceFor),
// through g's input bridge when a 2026-07-28 client's request goes to a
// server of an older era, which asks for input with requests of its own.
func forwardBridged[R mcp.Result](g *Gateway, ctx context.Context, principal policy.Principal, u *upstream,
	req bridgedRequest, call func(context.Context, *upstream) (R, error)) (R, error) {
	var zero R
	u, release, err := g.instanceFor(ctx, u, principal)
	if err != nil {
		return zero, err
	}
	defer release()
	if !requestMetaFrom(ctx).modern || u.modern != nil {
		return call(ctx, u)
	}
	res, asked, state, err := g.inputs.call(ctx, principal, req, &u.legacy.relayed, g.inBackground,
		func(ctx context.Context) (mcp.Result, error) { return call(ctx, u) })
	switch {
	case err != nil:
		return zero, err
	case asked != nil:
		return inputRequired[R](asked, state)
	}
	return completeResult(res.(R)), nil
}

// call serves one round of a bridged request: a first round starts the
// server call (run) on spawn's goroutine; a retry (requestState set) finds
// the held call, gives the server the client's answers and continues it.
// Either way it returns the server's result, or the server's requests for
// the client and the requestState of the call held for its answers.
func (b *inputBridge) call(ctx context.Context, principal policy.Principal, req bridgedRequest, relayed *relayedCounter,
	spawn func(func()) bool, run func(context.Context) (mcp.Result, error)) (mcp.Result, mcp.InputRequestMap, string, error) {
	down := requestMetaFrom(ctx)
	who := principalIdentity(principalDefaults(principal))
	var c *bridgedCall
	var err error
	if down.requestState != "" {
		c, err = b.resume(down.requestState, who, req)
	} else {
		c, err = b.start(ctx, who, req, relayed, spawn, run)
	}
	if err != nil {
		return nil, nil, "", err
	}
	res, asked, err := b.await(ctx, c, down.inputResponses)
	return res, asked, c.state, err
}

// start runs the server call on its own goroutine, under a context of its
// own: it outlives the client request that started it.
func (b *inputBridge) start(ctx context.Context, who string, req bridgedRequest, relayed *relayedCounter,
	spawn func(func()) bool, run func(context.Context) (mcp.Result, error)) (*bridgedCall, error) {
	state, err := newRequestState()
	if err != nil {
		return nil, err
	}
	down := requestMetaFrom(ctx)
	// The first round is the one being answered from the start, not only
	// once await begins: what the server sends as soon as the call starts
	// (a log message, progress) may be read before that, and is this
	// round's, not a parked call's.
	c := &bridgedCall{state: state, principal: who, request: req, caps: down.capabilities(), relayed: relayed,
		asks: make(chan *upstreamAsk), done: make(chan bridgedOutcome, 1), waiting: map[string]*upstreamAsk{}, round: down}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m := down
	m.bridge, m.inputResponses, m.requestState = c, nil, ""
	upCtx := context.WithValue(c.ctx, requestMetaKey{}, m)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.cancel()
		return nil, errors.New("gateway: closed")
	}
	b.live[c] = true
	b.mu.Unlock()
	if !spawn(func() {
		res, err := run(upCtx)
		c.done <- bridgedOutcome{res, err}
	}) {
		b.release(c)
		return nil, errors.New("gateway: closed")
	}
	return c, nil
}

// await gives the server the client's answers and answers the client
// request in ctx with what comes first from the server call: its result,
// or requests for the client (then the call is parked until the client's
// retry). A client that goes away ends the call.
func (b *inputBridge) await(ctx context.Context, c *bridgedCall, answers mcp.InputResponseMap) (mcp.Result, mcp.InputRequestMap, error) {
	// What the server sent while the call was parked had no round to go
	// to: it is dropped, not sent on this one.
	c.relayed.wait(ctx)
	c.setRound(requestMetaFrom(ctx))
	defer c.setRound(requestMeta{})
	c.answer(answers)
	for {
		if c.unanswered() == 0 {
			select {
			case out := <-c.done:
				b.release(c)
				return out.res, nil, out.err
			case ask := <-c.asks:
				c.add(ask)
				c.drain()
			case <-ctx.Done():
				b.release(c)
				return nil, nil, ctx.Err()
			}
		}
		// What the server sent before its requests reaches this round
		// before the round ends: parked, the call has none to go to.
		c.relayed.wait(ctx)
		if asked, ok := b.park(c); ok {
			return nil, asked, nil
		}
		// Over a limit: the server's requests were refused; its call goes on.
	}
}

// park holds c for the client's retry and returns what the server waits
// for from the client. Holding one more call over a limit refuses the
// server's requests instead (false).
func (b *inputBridge) park(c *bridgedCall) (mcp.InputRequestMap, bool) {
	b.mu.Lock()
	if !c.counted {
		if b.held >= b.cfg.MaxHeld || b.perPrincipal[c.principal] >= b.cfg.MaxPerPrincipal {
			b.mu.Unlock()
			b.logger.Warn("call not held for client input: limit reached", "method", c.request.method, "name", c.request.name,
				"held", b.cfg.MaxHeld, "per_principal", b.cfg.MaxPerPrincipal)
			c.refuseAll(errHeldCallsExhausted)
			return nil, false
		}
		c.counted = true
		b.held++
		b.perPrincipal[c.principal]++
	}
	b.parked[c.state] = c
	c.expiry = time.AfterFunc(b.cfg.Timeout, func() { b.expire(c) })
	b.mu.Unlock()
	return c.requests(), true
}

// resume takes the call parked under state for a retry by the principal
// who of the same request (method, name and arguments).
func (b *inputBridge) resume(state, who string, req bridgedRequest) (*bridgedCall, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.parked[state]
	if c == nil || c.principal != who {
		return nil, errUnknownRequestState
	}
	if !reflect.DeepEqual(c.request, req) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"requestState was issued for another %s: a retry must repeat the request's name, URI and arguments", c.request.method)}
	}
	delete(b.parked, state)
	c.expiry.Stop()
	return c, nil
}

// drop ends the call parked under state for principal (the policy denied
// its retry). Anything else is left as it is.
func (b *inputBridge) drop(state string, principal policy.Principal) {
	if state == "" {
		return
	}
	who := principalIdentity(principalDefaults(principal))
	b.mu.Lock()
	c := b.parked[state]
	if c == nil || c.principal != who {
		b.mu.Unlock()
		return
	}
	delete(b.parked, state)
	c.expiry.Stop()
	b.mu.Unlock()
	b.release(c)
}

// expire ends a call whose client did not come back in time.
func (b *inputBridge) expire(c *bridgedCall) {
	b.mu.Lock()
	if b.parked[c.state] != c {
		b.mu.Unlock()
		return // resumed meanwhile
	}
	delete(b.parked, c.state)
	b.mu.Unlock()
	b.logger.Info("call held for client input expired; cancelled on the server",
		"method", c.request.method, "name", c.request.name, "timeout", b.cfg.Timeout)
	b.release(c)
}

// release cancels c's server call (a no-op once it is answered) and
// forgets c. It is idempotent.
func (b *inputBridge) release(c *bridgedCall) {
	c.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.live, c)
	if c.counted {
		c.counted = false
		b.held--
		if b.perPrincipal[c.principal]--; b.perPrincipal[c.principal] <= 0 {
			delete(b.perPrincipal, c.principal)
		}
	}
}

// cancelParked ends every call waiting for a client's retry: at shutdown
// no retry can arrive any more.
func (b *inputBridge) cancelParked() {
	b.mu.Lock()
	var parked []*bridgedCall
	for state, c := range b.parked {
		delete(b.parked, state)
		c.expiry.Stop()
		parked = append(parked, c)
	}
	b.mu.Unlock()
	for _, c := range parked {
		b.release(c)
	}
}

// close ends every bridged call and refuses new ones.
func (b *inputBridge) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancelParked()
	b.mu.Lock()
	var live []*bridgedCall
	for c := range b.live {
		live = append(live, c)
	}
	b.mu.Unlock()
	for _, c := range live {
		b.release(c)
	}
}

// ask hands the server's request to the client through the bridged call
// and returns the client's answer, or an error when the server, the call
// or the client gives up.
func (c *bridgedCall) ask(ctx context.Context, method string, req mcp.InputRequest) (mcp.InputResponse, error) {
	a := &upstreamAsk{method: method, request: req, answer: make(chan askAnswer, 1)}
	select {
	case c.asks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
	defer c.forget(a)
	select {
	case ans := <-a.answer:
		return ans.res, ans.err
	case <-ctx.Done(): // the server cancelled its request
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
}

func (c *bridgedCall) setRound(m requestMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round = m
}

// current is the client request now being answered, if any: where the
// server's progress and log messages go.
func (c *bridgedCall) current() (requestMeta, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.round, c.round.session != nil
}

func (c *bridgedCall) add(a *upstreamAsk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys++
	c.waiting["input-"+strconv.Itoa(c.keys)] = a
}

// drain adds the server's requests already waiting to be taken, so that
// requests sent together reach the client in one round.
func (c *bridgedCall) drain() {
	for {
		select {
		case a := <-c.asks:
			c.add(a)
		default:
			return
		}
	}
}

func (c *bridgedCall) forget(a *upstreamAsk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range c.waiting {
		if w == a {
			delete(c.waiting, k)
		}
	}
}

func (c *bridgedCall) unanswered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// requests are the server's requests the client has yet to answer.
func (c *bridgedCall) requests() mcp.InputRequestMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := mcp.InputRequestMap{}
	for k, a := range c.waiting {
		out[k] = a.request
	}
	return out
}

// answer gives the server the client's answers to its requests; answers
// to keys not (or no longer) asked are ignored.
func (c *bridgedCall) answer(responses mcp.InputResponseMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, res := range responses {
		if a := c.waiting[k]; a != nil {
			a.answer <- askAnswer{res: res}
			delete(c.waiting, k)
		}
	}
}

func (c *bridgedCall) refuseAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, a := range c.waiting {
		a.answer <- askAnswer{err: err}
		delete(c.waiting, k)
	}
}

// newRequestState is 256 random bits: a held call is found by it, so it
// must not be guessable.
func newRequestState() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("requestState: %w", err)
	}
	return "mcp-warden." + base64.RawURLEncoding.EncodeToString(b), nil
}

// inputRequired is the result (R: *mcp.CallToolResult, *GetPromptResult
// or *ReadResourceResult) asking the client for the server's requests: the
// SDK sets resultType only on results its own handlers return, so it is
// built from its wire form.
func inputRequired[R mcp.Result](requests mcp.InputRequestMap, state string) (R, error) {
	var res R
	wire, err := json.Marshal(map[string]any{"resultType": "input_required", "inputRequests": requests, "requestState": state})
	if err == nil {
		err = json.Unmarshal(wire, &res)
	}
	if err != nil { // the requests came from the SDK's own types
		var zero R
		return zero, fmt.Errorf("mcp-warden: cannot ask the client for input: %w", err)
	}
	return res, nil
}

// completeTemplates hold, by result type, a result whose resultType is
// "complete", decoded once from its wire form: the field is unexported and
// set by the SDK only on results its own handlers return.
var completeTemplates sync.Map // reflect.Type → reflect.Value (the struct)

// completeResult is res (a *mcp.CallToolResult, *GetPromptResult or
// *ReadResourceResult from a server of an older era) with resultType
// "complete", which a 2026-07-28 client requires on every result of these
// methods. The exported fields are copied into a copy of the template, as
// is the tool result's error; TestCompleteResultKeepsEverything fails if
// the SDK adds another unexported field.
func completeResult[R mcp.Result](res R) R {
	v := reflect.ValueOf(res)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return res
	}
	t := v.Type().Elem()
	tmpl, ok := completeTemplates.Load(t)
	if !ok {
		p := reflect.New(t)
		if err := json.Unmarshal([]byte(`{"resultType":"complete"}`), p.Interface()); err != nil {
			return res // not one of the three: nothing to mark
		}
		tmpl, _ = completeTemplates.LoadOrStore(t, p.Elem())
	}
	out := reflect.New(t)
	out.Elem().Set(tmpl.(reflect.Value))
	for i := range t.NumField() {
		if t.Field(i).IsExported() {
			out.Elem().Field(i).Set(v.Elem().Field(i))
		}
	}
	if r, ok := any(res).(*mcp.CallToolResult); ok && r.GetError() != nil {
		out.Interface().(*mcp.CallToolResult).SetError(r.GetError())
	}
	return out.Interface().(R)
}

// askBridged asks the client of a bridged call for what the server
// requested, if the client declared it can answer such requests, and
// returns the answer as the result type T the server expects.
func askBridged[T any](ctx context.Context, c *bridgedCall, method string, req mcp.InputRequest) (T, error) {
	var zero T
	if !declares(c.caps, method) {
		if method == "roots/list" { // as the spec prescribes for a client without roots
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client does not support roots"}
		}
		return zero, fmt.Errorf("mcp-warden: the client did not declare the capability for %s", method)
	}
	res, err := c.ask(ctx, method, req)
	if err != nil {
		return zero, err
	}
	// The SDK decodes an answer by its shape; the server gets it as the
	// type of its request, or an error if the client answered something else.
	raw, err := json.Marshal(res)
	out := new(T)
	if err == nil && fits(method, res) {
		err = json.Unmarshal(raw, out)
	} else if err == nil {
		err = fmt.Errorf("mcp-warden: the client's answer to %s is of another kind (%T)", method, res)
	}
	if err != nil {
		return zero, err
	}
	return *out, nil
}

// fits reports whether res is an answer to method.
func fits(method string, res mcp.InputResponse) bool {
	switch res.(type) {
	case *mcp.ElicitResult:
		return method == "elicitation/create"
	case *mcp.CreateMessageResult, *mcp.CreateMessageWithToolsResult:
		return method == "sampling/createMessage"
	case *mcp.ListRootsResult:
		return method == "roots/list"
	}
	return false
}

// declares reports whether a client with caps may be sent method.
func declares(caps *mcp.ClientCapabilities, method string) bool {
	if caps == nil {
		return false
	}
	switch method {
	case "elicitation/create":
		return caps.Elicitation != nil
	case "sampling/createMessage":
		return caps.Sampling != nil
	case "roots/list":
		return caps.RootsV2 != nil
	}
	return false
}

// heldCount is how many calls are held, for tests.
func (b *inputBridge) heldCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}
