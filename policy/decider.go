package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// Decider makes every decision of a gateway: it evaluates the Engine on an
// Input, turns the result into a Decision (denying on any error), and writes
// the decision to the DecisionLog before returning it. It is safe for
// concurrent use.
//
// The decisions of DecideExposure and Decide are cached when the engine is
// one of this package's (NewRegoEngine, NewWasmEngine) and its policy
// provably depends on nothing that differs between two identical requests:
// it reads none of VolatileInputFields and calls no non-deterministic
// builtin. The caches live as long as the Decider: a new policy or new data
// means a new Decider.
type Decider struct {
	engine Engine
	log    *DecisionLog
	cache  *listCache  // nil when the policy's decisions may not be reused
	calls  *callCache  // nil when the policy's decisions may not be reused
	fields inputFields // what the engine's policy reads of an Input; nil: all
	// eval evaluates an input reduced to fields.
	eval func(ctx context.Context, input []byte) (evaluation, error)
	// concurrency is how many evaluations the engine runs at once.
	concurrency int
	// run runs a single decision's evaluation (see WithEvaluationRunner);
	// nil: on the caller's goroutine.
	run func(func())
}

// DeciderOption configures a Decider.
type DeciderOption func(*Decider)

// WithEvaluationRunner has Decide run each policy evaluation through run,
// which must call its argument once and return after it has returned: a
// gateway runs evaluations on goroutines whose stacks have already grown
// to what the engine needs. A decision served from the cache, and the
// logging of every decision, stay on the caller's goroutine.
func WithEvaluationRunner(run func(func())) DeciderOption {
	return func(d *Decider) { d.run = run }
}

// NewDecider returns a Decider that evaluates with engine and logs to log.
func NewDecider(engine Engine, log *DecisionLog, opts ...DeciderOption) *Decider {
	d := &Decider{engine: engine, log: log}
	for _, o := range opts {
		o(d)
	}
	if e, ok := engine.(cacheableEngine); ok && e.cacheable() {
		d.cache, d.calls = newListCache(), newCallCache()
	}
	d.fields, d.concurrency = nil, 1
	d.eval = func(ctx context.Context, input []byte) (evaluation, error) {
		v, err := engine.Evaluate(ctx, input)
		return evaluation{value: v}, err
	}
	if e, ok := engine.(prunedInputEngine); ok {
		d.fields, d.eval, d.concurrency = e.inputFields(), e.evaluatePruned, e.concurrency()
	}
	return d
}

// CachesExposure reports whether DecideExposure reuses decisions (see
// Decider).
func (d *Decider) CachesExposure() bool { return d.cache != nil }

// Revision identifies the policy and data decisions are made with.
func (d *Decider) Revision() string { return d.engine.Revision() }

// Decide decides one request and logs it. It never fails: an evaluation
// error, an undefined or malformed result, or a log that cannot be written
// yields a denial whose Reason says why (a tools/call denied for an error is
// also Hidden, so errors never reveal which tools exist).
//
// When the policy's decisions may be reused (see Decider), a request whose
// input, reduced to what the policy reads, equals one already decided
// without error gets that decision again; its event is logged like any
// other, with metrics.cache_hits 1.
func (d *Decider) Decide(ctx context.Context, in Input) Decision {
	start := time.Now()
	dec, evalErr, hit := d.evaluate(ctx, in, d.calls, d.run)
	decided := time.Now()
	if err := d.log.logDecision(ctx, &in, dec, evalErr, hit, decided, decided.Sub(start)); err != nil {
		return denyForError(in.Action, fmt.Errorf("decision log: %w", err))
	}
	return dec
}

// DecideExposure decides, for a list (tools/list, resources/list or
// prompts/list), whether each of inputs (one per item, all with the same
// list action) is exposed. It writes one log event that
// carries every tool's decision and reason, and returns the decisions in the
// order of inputs. If the log cannot be written nothing is exposed.
//
// Decisions served from the cache (see Decider) are logged like the others;
// the event's metrics.cache_hits counts them. A list that repeats, item for
// item and decision for decision, the last list this Decider logged in full
// for the same principal and servers is logged as a reference to that event
// (see Event), and costs no per-item lookup. The decisions returned are
// read-only: a repeated list gets the slice of the list it repeats, and
// decisions share their Extra maps with earlier calls.
func (d *Decider) DecideExposure(ctx context.Context, inputs []Input) []Decision {
	start := time.Now()
	if d.cache != nil {
		if m := d.cache.repeatOf(inputs); m != nil {
			decisions := m.decisions
			took := time.Since(start)
			ev := d.log.newRepeatEvent(&inputs[0], m, took, took)
			ev.Metrics[metricCacheHits] = int64(len(inputs))
			_, err := d.log.write(ctx, ev, m.written.File)
			if err == nil {
				return decisions
			}
			if !errors.Is(err, auditlog.ErrOtherFile) {
				return deniedForLog(inputs, err)
			}
			// The log moved to a new file: log this list in full there.
			d.cache.forget(m)
		}
	}
	decisions := make([]Decision, len(inputs))
	errs := make([]error, len(inputs))
	hit := make([]bool, len(inputs))
	hits := 0
	var keys []listKey
	if d.cache != nil {
		keys = d.cache.keys(inputs)
		hits = d.cache.lookup(keys, decisions, hit)
	}
	failed := d.evaluateMisses(ctx, inputs, decisions, errs, hit)
	if d.cache != nil && hits < len(inputs) {
		d.cache.store(keys, decisions, errs, hit)
	}
	eval := time.Since(start)
	ev := d.log.newListEvent(inputs, decisions, errs, time.Since(start), eval)
	if d.cache != nil {
		ev.Metrics[metricCacheHits] = int64(hits)
	}
	at, err := d.log.write(ctx, ev, 0)
	if err != nil {
		return deniedForLog(inputs, err)
	}
	if d.cache != nil && at.Hash() != "" && !failed {
		d.cache.remember(keys, decisions, ev.DecisionID, at)
	}
	return decisions
}

// listChunk is how many items of a list one worker evaluates at a time,
// and the least a worker is started for.
const listChunk = 32

// evaluateMisses evaluates each input not hit into decisions and errs,
// and reports whether any evaluation failed. A long list is shared
// among as many workers as the engine evaluates at once (and there are
// CPUs): a cold list of a large server is that many times quicker.
func (d *Decider) evaluateMisses(ctx context.Context, inputs []Input, decisions []Decision, errs []error, hit []bool) bool {
	misses := 0
	for _, h := range hit {
		if !h {
			misses++
		}
	}
	workers := min(d.concurrency, runtime.GOMAXPROCS(0), misses/listChunk)
	var next atomic.Int64 // the first item of the next chunk
	work := func() (failed bool) {
		for {
			start := int(next.Add(listChunk)) - listChunk
			if start >= len(inputs) {
				return failed
			}
			for i := start; i < min(start+listChunk, len(inputs)); i++ {
				if !hit[i] {
					decisions[i], errs[i], _ = d.evaluate(ctx, inputs[i], nil, nil)
					failed = failed || errs[i] != nil
				}
			}
		}
	}
	if workers <= 1 {
		return work()
	}
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(func() {
			if work() {
				failed.Store(true)
			}
		})
	}
	if work() {
		failed.Store(true)
	}
	wg.Wait()
	return failed.Load()
}

// deniedForLog is every item of a list denied because its event could not
// be written.
func deniedForLog(inputs []Input, err error) []Decision {
	decisions := make([]Decision, len(inputs))
	for i := range decisions {
		decisions[i] = denyForError(inputs[i].Action, fmt.Errorf("decision log: %w", err))
	}
	return decisions
}

// evaluate runs the engine and converts its result, through calls when it
// is not nil: an input whose reduced encoding calls holds gets that
// decision without an evaluation (hit), and a decision made without error
// is kept there. The error is returned only for the log; the Decision
// already reflects it.
func (d *Decider) evaluate(ctx context.Context, in Input, calls *callCache, run func(func())) (dec Decision, err error, hit bool) {
	b, err := d.fields.encode(&in)
	if err != nil {
		err = fmt.Errorf("encode input: %w", err)
		return denyForError(in.Action, err), err, false
	}
	var key [32]byte
	if calls != nil {
		key = sha256.Sum256(b)
		if dec, ok := calls.lookup(key); ok {
			return dec, nil, true
		}
	}
	var ev evaluation
	if run == nil {
		ev, err = d.eval(ctx, b)
	} else {
		run(func() { ev, err = d.eval(ctx, b) })
	}
	dec, err = decisionOf(in.Action, ev, err)
	if calls != nil && err == nil {
		calls.store(key, dec)
	}
	return dec, err, false
}

// decisionOf is the Decision of an evaluation that returned ev and err
// (denied for any error, which is returned for the log), for action.
func decisionOf(action Action, ev evaluation, err error) (Decision, error) {
	if err != nil {
		err = fmt.Errorf("evaluate %s: %w", Entrypoint, err)
		return denyForError(action, err), err
	}
	dec, err := decisionFromResult(ev.value)
	if err != nil {
		dec = denyForError(action, err)
	}
	dec.nondeterministic = ev.nondeterministic
	return dec, err
}

// decisionFromResult reads a Decision out of the entry point's value.
func decisionFromResult(v any) (Decision, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return Decision{}, fmt.Errorf("%s is %T, want an object with a boolean \"allow\"", Entrypoint, v)
	}
	allow, ok := obj["allow"].(bool)
	if !ok {
		return Decision{}, fmt.Errorf("%s.allow is %T, want a boolean", Entrypoint, obj["allow"])
	}
	dec := Decision{Allow: allow}
	if r, present := obj["reason"]; present {
		s, ok := r.(string)
		if !ok {
			return Decision{}, fmt.Errorf("%s.reason is %T, want a string", Entrypoint, r)
		}
		dec.Reason = s
	}
	if h, present := obj["hidden"]; present {
		b, ok := h.(bool)
		if !ok {
			return Decision{}, fmt.Errorf("%s.hidden is %T, want a boolean", Entrypoint, h)
		}
		dec.Hidden = b
	}
	for k, x := range obj {
		switch k {
		case "allow", "reason", "hidden":
		default:
			if dec.Extra == nil {
				dec.Extra = map[string]any{}
			}
			dec.Extra[k] = x
		}
	}
	return dec, nil
}

// denyForError is the fail-closed decision. The client-facing reason is
// generic; the error itself goes to the log.
func denyForError(action Action, err error) Decision {
	return Decision{
		Allow:  false,
		Hidden: action == ActionToolsCall || action == ActionResourcesRead || action == ActionPromptsGet,
		Reason: "denied: policy error (" + err.Error() + ")",
		Err:    err,
	}
}
