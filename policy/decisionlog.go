package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
	"github.com/mcp-warden/mcp-warden/policy/internal/logship"
)

// Event is one decision-log record, in OPA's decision-log event schema
// (EventV1 of OPA's logs plugin), so that tools built for OPA decision logs
// read it unchanged.
//
// A tools/call (or a single exposure decision) is one event whose Input is
// the Input document and whose Result is the decision. A tools/list is one
// event whose Input is {"action": "tools/list", "principal", "request_id",
// "session_id", "time", "tools": [{"server", "tool"}, …]} and whose Result
// is the list of per-tool decisions in the same order, so each one can be
// replayed by rebuilding its Input. A list that repeats the last list
// logged in full for the same principal and servers (same items, same
// decisions, all from the exposure cache) is logged without its items:
// its Input has no "tools" and its Result is {"same_as": {"decision_id",
// "hash"}}, naming that earlier event, which is in the same file.
type Event struct {
	Labels     map[string]string         `json:"labels"`
	DecisionID string                    `json:"decision_id"`
	Bundles    map[string]BundleRevision `json:"bundles,omitempty"`
	Path       string                    `json:"path"`
	Input      any                       `json:"input"`
	Result     any                       `json:"result,omitempty"`
	Error      *EventError               `json:"error,omitempty"`
	RequestID  uint64                    `json:"req_id"`
	Timestamp  string                    `json:"timestamp"`
	Metrics    map[string]int64          `json:"metrics"`
	// Erased and Masked list the paths the mask removed and replaced.
	Erased []string `json:"erased,omitempty"`
	Masked []string `json:"masked,omitempty"`
	// Custom holds notes of the gateway, such as a failing drop or mask
	// rule.
	Custom map[string]any `json:"custom,omitempty"`
	// NDBuiltinCache holds what the non-deterministic builtins the
	// evaluation called returned, by builtin and arguments
	// ({"time.now_ns": {"[]": 1700000000000000000}}), as OPA logs it, so
	// that a replay decides as the evaluation did. Absent when the policy
	// called none.
	NDBuiltinCache any `json:"nd_builtin_cache,omitempty"`
}

func (ev *Event) note(key, value string) {
	if ev.Custom == nil {
		ev.Custom = map[string]any{}
	}
	ev.Custom[key] = value
}

type eventNotesKey struct{}

// WithEventNotes returns ctx carrying notes that every decision event
// logged under it holds in its "custom" member (next to notes of the log's
// own): what made the gateway decide when no client asked, for example.
// Values must be of the types encoding/json decodes into (string, bool,
// float64, []any, map[string]any, nil). Notes given under a ctx that
// already carries some are added to them; a key given again replaces its
// value.
func WithEventNotes(ctx context.Context, notes map[string]any) context.Context {
	if outer, ok := ctx.Value(eventNotesKey{}).(map[string]any); ok {
		merged := make(map[string]any, len(outer)+len(notes))
		maps.Copy(merged, outer)
		maps.Copy(merged, notes)
		notes = merged
	}
	return context.WithValue(ctx, eventNotesKey{}, notes)
}

// BundleRevision is the revision of the policy an event was decided with.
type BundleRevision struct {
	Revision string `json:"revision"`
}

// EventError records why a decision was denied for an error.
type EventError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// listInput is the logged input of a list event (tools/list,
// resources/list or prompts/list): the listed items under "tools",
// "resources" or "prompts".
type listInput struct {
	Action    Action       `json:"action"`
	Principal Principal    `json:"principal"`
	RequestID string       `json:"request_id,omitempty"`
	SessionID string       `json:"session_id,omitempty"`
	Time      string       `json:"time"`
	Tools     listedInputs `json:"tools,omitempty"`
	Resources listedInputs `json:"resources,omitempty"`
	Prompts   listedInputs `json:"prompts,omitempty"`
}

// listedInputs are the items of a list event, kept as their inputs (no
// copy per item); each is logged as a listedItem.
type listedInputs []Input

// MarshalJSON writes the items as [{"server", "tool" | "resource" |
// "prompt"}, …], the form the event encoder writes directly.
func (l listedInputs) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	items := make([]listedItem, len(l))
	for i, in := range l {
		items[i] = listedItem{Server: in.Server, Tool: in.Tool, Resource: in.Resource, Prompt: in.Prompt}
	}
	return json.Marshal(items)
}

type listedItem struct {
	Server   Server    `json:"server"`
	Tool     *Tool     `json:"tool,omitempty"`
	Resource *Resource `json:"resource,omitempty"`
	Prompt   *Prompt   `json:"prompt,omitempty"`
}

// erasedArguments is the "erased" of the default mask.
var erasedArguments = []string{"/input/arguments"}

// decisionResult is a decision as an event's result: its JSON form is
// Decision.Result's, written without building that map.
type decisionResult Decision

// MarshalJSON writes Decision.Result.
func (d decisionResult) MarshalJSON() ([]byte, error) { return json.Marshal(Decision(d).Result()) }

// listRepeat is the result of a list event that repeats an earlier one.
type listRepeat struct {
	SameAs listRef `json:"same_as"`
}

// listRef names a list event logged in full: its decision id and the hash
// of its record.
type listRef struct {
	DecisionID string `json:"decision_id"`
	Hash       string `json:"hash"`
}

// listResult is one item's entry in the result of a list event, named by
// tool name, resource URI or prompt name.
type listResult struct {
	Tool     string `json:"tool,omitempty"`
	Resource string `json:"resource,omitempty"`
	Prompt   string `json:"prompt,omitempty"`
	Decision
	Error string `json:"error,omitempty"`
	// NDBuiltinCache is Event.NDBuiltinCache of this item's evaluation.
	NDBuiltinCache any `json:"nd_builtin_cache,omitempty"`
}

// calledWithArguments reports whether an nd_builtin_cache holds a call with
// arguments (a key other than "[]").
func calledWithArguments(nd any) bool {
	byBuiltin, _ := nd.(map[string]any)
	for _, calls := range byBuiltin {
		m, _ := calls.(map[string]any)
		for args := range m {
			if args != "[]" {
				return true
			}
		}
	}
	return false
}

// DecisionLog writes decision events as JSON lines. Each event is written
// with a single Write call under a lock, before the decision is returned to
// the gateway, so a response is never released for an unlogged decision.
// Events form a hash chain: each carries "prev_hash", the hash of the event
// before it, and "hash", its own sha256 over a canonical encoding, so that
// VerifyDecisionLog finds any edited, deleted, reordered or truncated
// record. Configured secret values are replaced by "[REDACTED]" wherever
// they occur in an event. It is safe for concurrent use.
type DecisionLog struct {
	labels   map[string]string
	revision string
	bundles  map[string]BundleRevision // shared by every event
	enc      *eventEncoder
	redact   []string
	// redactJSON holds each secret as it appears inside a JSON string, so
	// that the common case, no secret in the event, costs a byte search.
	redactJSON [][]byte

	chain    *auditlog.Writer
	shipper  *logship.Shipper // nil: no upload
	rules    *LogRules
	failOpen bool
	logger   *slog.Logger

	reqID atomic.Uint64
	clock timestampClock
}

// SyncPolicy says when decision-log records are forced to stable storage.
type SyncPolicy string

const (
	// SyncInterval (the default) writes each record with write(2) before
	// the decision is released, so it survives a crash of the gateway, and
	// fsyncs within SyncInterval, so a crash of the machine loses at most
	// that much.
	SyncInterval SyncPolicy = "interval"
	// SyncAlways fsyncs each record before the decision is released.
	SyncAlways SyncPolicy = "always"
	// SyncNever leaves flushing to the kernel.
	SyncNever SyncPolicy = "never"
)

// DecisionLogOptions configures a DecisionLog.
type DecisionLogOptions struct {
	// Labels are attached to every event (OPA's "labels": id, version…).
	Labels map[string]string
	// Revision is the policy revision, logged as the "mcp-warden" bundle's
	// revision in every event.
	Revision string
	// Redact lists secret values that must never appear in an event.
	Redact []string
	// Rules are the policy's drop and mask rules; nil applies the default
	// mask (arguments removed).
	Rules *LogRules
	// Sync is the fsync policy of a file log ("" means SyncInterval), and
	// SyncInterval its delay (0 means one second).
	Sync         SyncPolicy
	SyncInterval time.Duration
	// MaxBytes rotates a file log before it would grow larger; 0 never
	// rotates. Rotated files are named <path>.<UTC time>; the hash chain
	// continues across them.
	MaxBytes int64
	// FailOpen lets decisions stand when their event cannot be written
	// (the failure goes to Logger). The default denies them.
	FailOpen bool
	// Logger receives write failures when FailOpen is set, and upload
	// failures.
	Logger *slog.Logger
	// Upload, when its URL is set, also sends every written record to an
	// OPA-compatible decision-log service, in the background.
	Upload UploadOptions
}

// UploadOptions configures the upload of decision-log records to an
// OPA-compatible decision-log service: batches are POSTed to <URL>/logs as
// a gzipped JSON array (Content-Encoding: gzip). The records uploaded are
// exactly those written to the log, masked and chained. Uploading never
// holds up a decision: records wait in a bounded buffer whose oldest
// records are dropped (and counted in UploadStats) when it is full, and a
// failed upload is retried with exponential backoff (100 ms doubling to
// 30 s).
type UploadOptions struct {
	// URL is the service's base URL, e.g. https://logs.example.com/v1.
	URL string
	// BufferEvents bounds the records waiting for upload (0 means 10000).
	BufferEvents int
	// Interval is how long a record may wait to be batched with later
	// ones (0 means one second).
	Interval time.Duration
	// MaxRecordBytes leaves records larger than this out of the upload
	// (they stay in the file; counted as dropped); 0: no limit.
	MaxRecordBytes int
	// MaxPerSecond bounds the records uploaded per second (OPA's
	// max_decisions_per_second); records beyond it stay in the file only
	// and are counted as dropped. 0: no limit.
	MaxPerSecond float64
	// Authorization is sent as the Authorization header of every upload,
	// e.g. "Bearer <token>"; it is never logged.
	Authorization string
}

// UploadStats counts what happened to the records handed to the upload.
type UploadStats struct {
	// Shipped records were accepted by the service.
	Shipped uint64
	// Dropped records were never uploaded: the buffer was full, they
	// were over MaxRecordBytes or MaxPerSecond, or they were still waiting
	// when the log was closed.
	Dropped uint64
	// Failures counts failed upload attempts (each is retried).
	Failures uint64
}

// NewDecisionLog returns a log writing to w, whose chain starts afresh.
// It neither rotates nor syncs w.
func NewDecisionLog(w io.Writer, opts DecisionLogOptions) *DecisionLog {
	return newDecisionLog(auditlog.NewWriter(w), opts)
}

func newDecisionLog(chain *auditlog.Writer, opts DecisionLogOptions) *DecisionLog {
	l := &DecisionLog{chain: chain, labels: opts.Labels, revision: opts.Revision,
		rules: opts.Rules, failOpen: opts.FailOpen, logger: opts.Logger}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if l.revision != "" {
		l.bundles = map[string]BundleRevision{"mcp-warden": {Revision: l.revision}}
	}
	l.enc = newEventEncoder(l.labels, l.bundles)
	for _, s := range opts.Redact {
		if s != "" {
			l.redact = append(l.redact, s)
			l.redactJSON = append(l.redactJSON, jsonEscaped(s))
		}
	}
	if opts.Upload.URL != "" {
		l.shipper = logship.New(logship.Options{URL: opts.Upload.URL, BufferEvents: opts.Upload.BufferEvents,
			Interval: opts.Upload.Interval, MaxRecordBytes: opts.Upload.MaxRecordBytes, MaxPerSecond: opts.Upload.MaxPerSecond,
			Authorization: opts.Upload.Authorization, Logger: l.logger})
		chain.Tee(l.shipper.Enqueue)
	}
	return l
}

// UploadStats reports the upload's counters; all are zero without one.
func (l *DecisionLog) UploadStats() UploadStats {
	if l.shipper == nil {
		return UploadStats{}
	}
	st := l.shipper.Stats()
	return UploadStats{Shipped: st.Shipped, Dropped: st.Dropped, Failures: st.Failures}
}

// OpenDecisionLog returns a log appending to the file at path, created with
// mode 0600 if missing, continuing the hash chain of its last record. It
// refuses a file whose last record is incomplete or altered. Close closes
// the file.
func OpenDecisionLog(path string, opts DecisionLogOptions) (*DecisionLog, error) {
	sync := auditlog.SyncInterval
	switch opts.Sync {
	case "", SyncInterval:
	case SyncAlways:
		sync = auditlog.SyncAlways
	case SyncNever:
		sync = auditlog.SyncNever
	default:
		return nil, fmt.Errorf("decision log: unknown sync policy %q", opts.Sync)
	}
	chain, err := auditlog.Open(path, auditlog.Options{MaxBytes: opts.MaxBytes, Sync: sync, Interval: opts.SyncInterval})
	if err != nil {
		return nil, err
	}
	return newDecisionLog(chain, opts), nil
}

// Close syncs and closes the log's file, if it owns one, and stops the
// upload after a last short attempt to send what is waiting; later
// decisions cannot be logged and are denied.
//
// It reports the chain's last hash to the logger ("decision log closed"):
// an operational log kept elsewhere thus holds a hash that `audit verify
// --includes` can require, which reveals records cut from the end.
func (l *DecisionLog) Close() error {
	err := l.chain.Close()
	l.logger.Info("decision log closed", "last_hash", l.chain.LastHash())
	if l.shipper != nil {
		err = errors.Join(err, l.shipper.Close())
	}
	return err
}

// logDecision writes the event of one decision (see write), made at
// decided after an evaluation of eval, built in a reused callEvent: a
// decision allocates only its id and timestamp.
func (l *DecisionLog) logDecision(ctx context.Context, in *Input, dec Decision, evalErr error, cached bool, decided time.Time, eval time.Duration) error {
	c := callEvents.Get().(*callEvent)
	l.fillEvent(c, in, dec, evalErr, decided, eval)
	if cached {
		c.metrics[metricCacheHits] = 1
	}
	_, err := l.write(ctx, &c.Event, 0)
	c.reset()
	callEvents.Put(c)
	return err
}

// callEvent is the event of one decision with the values it points to, so
// that it is one object, reused: nothing of an event outlives its write
// (rules see a JSON copy, the record is bytes, the upload gets a clone).
// Each has its own source of decision ids.
type callEvent struct {
	Event
	input   Input
	result  decisionResult
	metrics map[string]int64
	ids     *uuidSource
}

var callEvents = sync.Pool{New: func() any {
	return &callEvent{metrics: make(map[string]int64, 2), ids: newUUIDSource()}
}}

// reset drops what c points to, so the pool holds no caller's values.
func (c *callEvent) reset() {
	m, ids := c.metrics, c.ids
	clear(m)
	*c = callEvent{metrics: m, ids: ids}
}

// fillEvent makes c the event of the decision dec on in. Its two timers
// are the same clock reading: a single decision is its evaluation.
func (l *DecisionLog) fillEvent(c *callEvent, in *Input, dec Decision, evalErr error, decided time.Time, eval time.Duration) {
	c.metrics[timerDecision], c.metrics[timerEval] = eval.Nanoseconds(), eval.Nanoseconds()
	var id [16]byte
	c.ids.fill(&id)
	l.initEvent(&c.Event, c.metrics, &id, decided)
	c.input = *in
	erasedArgs := !l.rules.masksByPolicy() && in.Arguments != nil
	if erasedArgs {
		c.input.Arguments = nil          // the default mask, on the copy
		c.Erased = erasedArguments[:1:1] // shared: appending copies
	}
	c.result = decisionResult(dec)
	c.Input, c.Result = &c.input, &c.result
	if dec.nondeterministic != nil {
		nd, err := decodeJSON(dec.nondeterministic)
		switch {
		case err != nil:
			c.note("nd_builtin_cache_error", err.Error())
		case erasedArgs && calledWithArguments(nd):
			// Arguments are erased by the default mask: so is what builtins
			// were called with, which may hold them.
			c.Erased = append(c.Erased, "/nd_builtin_cache")
		default:
			c.NDBuiltinCache = nd
		}
	}
	if evalErr != nil {
		c.Error = &EventError{Code: "evaluation_error", Message: evalErr.Error()}
	}
}

func (l *DecisionLog) newListEvent(inputs []Input, decisions []Decision, errs []error, took, eval time.Duration) *Event {
	ev := l.baseEvent(took, eval)
	li := listInput{Action: ActionToolsList}
	results := make([]listResult, len(inputs))
	for i, in := range inputs {
		if i == 0 {
			li.Action, li.Principal, li.RequestID, li.SessionID, li.Time = in.Action, in.Principal, in.RequestID, in.SessionID, in.Time
		}
		results[i] = listResult{Decision: decisions[i]}
		if nd := decisions[i].nondeterministic; nd != nil {
			if v, err := decodeJSON(nd); err == nil {
				results[i].NDBuiltinCache = v
			}
		}
		switch {
		case in.Tool != nil:
			results[i].Tool = in.Tool.Name
		case in.Resource != nil:
			results[i].Resource = in.Resource.URI
		case in.Prompt != nil:
			results[i].Prompt = in.Prompt.Name
		}
		if errs[i] != nil {
			results[i].Error = errs[i].Error()
			ev.Error = &EventError{Code: "evaluation_error", Message: "one or more exposure decisions failed; see result"}
		}
	}
	switch li.Action {
	case ActionResourcesList:
		li.Resources = inputs
	case ActionPromptsList:
		li.Prompts = inputs
	default:
		li.Tools = inputs
	}
	ev.Input = li
	ev.Result = results
	return ev
}

// items are the inputs of a list event's items, as the Decider was given
// them: the head every item of a list shares (its action, principal,
// request and session ids, time; newListEvent logs the first item's) with
// each item's server and tool, resource or prompt, the only parts an item
// of a list has of its own. A replay rebuilds a list's inputs with it.
func (li *listInput) items() []Input {
	listed := li.Tools
	switch li.Action {
	case ActionResourcesList:
		listed = li.Resources
	case ActionPromptsList:
		listed = li.Prompts
	}
	inputs := make([]Input, len(listed))
	for i, it := range listed {
		inputs[i] = Input{Action: li.Action, Principal: li.Principal, RequestID: li.RequestID, SessionID: li.SessionID, Time: li.Time,
			Server: it.Server, Tool: it.Tool, Resource: it.Resource, Prompt: it.Prompt}
	}
	return inputs
}

// The metrics of every event: the time to decide and log, and the
// evaluation's part of it.
const (
	timerDecision = "timer_mcp_warden_decision_ns"
	timerEval     = "timer_rego_query_eval_ns"
	// metricCacheHits counts the decisions of an event that came from the
	// Decider's caches rather than from an evaluation.
	metricCacheHits = "cache_hits"
)

func (l *DecisionLog) baseEvent(took, eval time.Duration) *Event {
	ev := &Event{}
	var id [16]byte
	randomUUID(&id)
	l.initEvent(ev, map[string]int64{timerDecision: took.Nanoseconds(), timerEval: eval.Nanoseconds()}, &id, time.Now())
	return ev
}

// initEvent sets what every event has: labels, bundles, its decision id
// (the UUID of the random bytes id), the next req_id, the timestamp and
// metrics. The id and the timestamp are one allocation.
func (l *DecisionLog) initEvent(ev *Event, metrics map[string]int64, id *[16]byte, at time.Time) {
	ev.Labels, ev.Bundles, ev.Path, ev.Metrics = l.labels, l.bundles, EntrypointPath, metrics
	ev.RequestID = l.reqID.Add(1)
	var buf [uuidLen + 48]byte
	b := l.clock.appendFormat(appendUUID(buf[:0], id), at)
	s := string(b)
	ev.DecisionID, ev.Timestamp = s[:uuidLen], s[uuidLen:]
}

// newRepeatEvent is the event of a list that repeats the list logged in
// full as m (see Event).
func (l *DecisionLog) newRepeatEvent(first *Input, m *listMemo, took, eval time.Duration) *Event {
	ev := l.baseEvent(took, eval)
	ev.Input = listInput{Action: first.Action, Principal: first.Principal, RequestID: first.RequestID,
		SessionID: first.SessionID, Time: first.Time}
	ev.Result = listRepeat{SameAs: listRef{DecisionID: m.decisionID, Hash: m.hash}}
	return ev
}

// write applies the drop and mask rules to ev and appends it to the chain,
// to file number onlyInFile when that is not zero (else
// auditlog.ErrOtherFile, whatever FailOpen says). It returns where the
// record went: nothing when the event was dropped. With FailOpen a failure
// is reported to the logger and not returned.
func (l *DecisionLog) write(ctx context.Context, ev *Event, onlyInFile uint64) (auditlog.Appended, error) {
	if notes, ok := ctx.Value(eventNotesKey{}).(map[string]any); ok {
		for k, v := range notes {
			if ev.Custom == nil {
				ev.Custom = make(map[string]any, len(notes))
			}
			ev.Custom[k] = v
		}
	}
	at, err := l.append(ctx, ev, onlyInFile)
	if err != nil && l.failOpen && !errors.Is(err, auditlog.ErrOtherFile) {
		l.logger.Error("decision log write failed; decision released (fail-open configured)",
			"decision_id", ev.DecisionID, "error", err)
		return auditlog.Appended{}, nil
	}
	return at, err
}

func (l *DecisionLog) append(ctx context.Context, ev *Event, onlyInFile uint64) (auditlog.Appended, error) {
	if l.rules != nil {
		if drop, err := l.rules.apply(ctx, ev); err != nil || drop {
			return auditlog.Appended{}, err
		}
	}
	// The event is encoded straight into its canonical form, into a reused
	// buffer; only an event holding a configured secret takes the slower
	// way through a generic document, where the secret is replaced.
	buf := encodeBuffers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBuffer {
			encodeBuffers.Put(buf)
		}
	}()
	rec, err := l.enc.encode((*buf)[:0], ev)
	if err != nil {
		return auditlog.Appended{}, fmt.Errorf("encode event: %w", err)
	}
	*buf = rec.Canonical[:0]
	if l.holdsNoSecret(rec.Canonical) {
		rec.OnlyInFile = onlyInFile
		return l.chain.AppendEncoded(rec)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return auditlog.Appended{}, fmt.Errorf("encode event: %w", err)
	}
	if b, err = redactSecrets(b, l.redact); err != nil {
		return auditlog.Appended{}, err
	}
	return l.chain.AppendIn(b, onlyInFile)
}

// holdsNoSecret reports whether the canonical event b is free of every
// configured secret, raw or as escaped inside a JSON string.
func (l *DecisionLog) holdsNoSecret(b []byte) bool {
	for i, s := range l.redact {
		if bytes.Contains(b, []byte(s)) || bytes.Contains(b, l.redactJSON[i]) {
			return false
		}
	}
	return true
}

// redactSecrets replaces every occurrence of a secret inside the JSON
// strings (keys and values) of the encoded event.
func redactSecrets(b []byte, secrets []string) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("redact event: %w", err)
	}
	return json.Marshal(redactValue(v, secrets))
}

func redactValue(v any, secrets []string) any {
	switch x := v.(type) {
	case string:
		for _, s := range secrets {
			x = strings.ReplaceAll(x, s, "[REDACTED]")
		}
		return x
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], secrets)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[redactValue(k, secrets).(string)] = redactValue(e, secrets)
		}
		return out
	default:
		return v
	}
}

// jsonEscaped is s as it appears inside a canonical JSON string.
func jsonEscaped(s string) []byte {
	b, _ := auditlog.AppendCanonical(nil, s)
	return b[1 : len(b)-1]
}
