package policy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// ReplayFinding is one logged decision that a replay did not confirm: it
// was decided otherwise (Logged and Replayed differ), or it could not be
// replayed (NotReplayable says why).
type ReplayFinding struct {
	// File and Line (1-based) locate the event; for a repeated list, the
	// repeat's own line.
	File string
	Line int
	// DecisionID, Action and Principal are the event's.
	DecisionID string
	Action     Action
	Principal  string
	// Item names what was decided: "tool <name>", "resource <uri>" or
	// "prompt <name>", and for an item of a list its place in it ("(item 2
	// of 5)"). Empty when the event does not say.
	Item string
	// Logged and Replayed are the two decisions as JSON: the result object
	// ({"allow", "reason", "hidden", …}; for a list item allow, reason and
	// hidden, all its event logs), or {"error": message} for a denial for
	// an error. Both are empty when the decision was not replayed.
	Logged, Replayed string
	// NotReplayable says why the decision could not be replayed.
	NotReplayable string
}

// findingValueMax is how much of a decision a finding's String shows.
const findingValueMax = 300

// String is the finding as one line: file:line, decision id, action, item,
// principal, then both decisions (each cut at 300 bytes) or why it was not
// replayed.
func (f ReplayFinding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: decision %s %s", f.File, f.Line, printable(f.DecisionID), printable(string(f.Action)))
	if f.Item != "" {
		b.WriteString(" " + printable(f.Item))
	}
	fmt.Fprintf(&b, " principal %q: ", f.Principal)
	if f.NotReplayable != "" {
		b.WriteString("not replayable: " + f.NotReplayable)
		return b.String()
	}
	fmt.Fprintf(&b, "logged %s, replayed %s", truncated(f.Logged), truncated(f.Replayed))
	return b.String()
}

// printable is s, quoted when it holds a control character: names come
// from upstream servers and clients, and must not forge a line of the
// report.
func printable(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

func truncated(s string) string {
	if len(s) <= findingValueMax {
		return s
	}
	cut := findingValueMax
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// ReplaySummary counts what ReplayDecisionLog replayed. Each item of a
// list is one decision; a repeated list has the decisions of the list it
// repeats. Decisions = Same + Differ + NotReplayable.
type ReplaySummary struct {
	Files, Events                          int
	Decisions, Same, Differ, NotReplayable int
	// Revision is the revision of the policy replayed with.
	Revision string
	// OtherRevisions counts, file by file, the events logged with another
	// revision (or none).
	OtherRevisions []ReplayRevision
}

// ReplayRevision is how many events of File name Revision ("" when they
// name none) in their bundles.
type ReplayRevision struct {
	File, Revision string
	Events         int
}

// ReplayDecisionLog decides every decision logged in files again, with
// engine, which must come from NewRegoEngine, and compares the outcomes.
// Each event's input is rebuilt from the event: a single decision's from
// its input, each item of a list's from the list's head (action,
// principal, ids, time) and the item, exactly as the Decider was given
// them; a repeated list's from its own head and the items of the list it
// repeats, which must be earlier in the same file. The non-deterministic
// builtins are answered from the event's nd_builtin_cache, so a policy
// that reads the time decides as it did then.
//
// A decision is not replayable when the log's mask removed or replaced a
// part of its input that the policy reads (found as the engine found what
// to give it: rego.Policy.InputPaths), or its result, or when the policy
// calls a non-deterministic builtin whose logged result is not in the
// event (the mask erased the cache, or the policy is new). Two denials for
// an error are the same outcome, whatever their messages say.
//
// report, when not nil, receives each decision that differs or is not
// replayed, in log order. Replay does not verify the hash chain: verify
// files first (VerifyDecisionLog). A line that is not a JSON object is a
// *LogProblem of kind "malformed", a file that ends inside a line one of
// kind "truncated"; other errors are I/O errors.
func ReplayDecisionLog(ctx context.Context, engine Engine, files []string, report func(ReplayFinding)) (ReplaySummary, error) {
	e, ok := engine.(*regoEngine)
	if !ok {
		return ReplaySummary{}, fmt.Errorf("replay: the engine is %T; replay evaluates with the rego engine (NewRegoEngine)", engine)
	}
	if report == nil {
		report = func(ReplayFinding) {}
	}
	r := &replayer{engine: e, report: report, sum: ReplaySummary{Revision: e.Revision()}}
	for _, file := range files {
		if err := r.file(ctx, file); err != nil {
			return r.sum, err
		}
		r.sum.Files++
	}
	return r.sum, nil
}

type replayer struct {
	engine *regoEngine
	report func(ReplayFinding)
	sum    ReplaySummary
	// lists are the list events of the current file logged in full, by
	// record hash, for the repeats that name them.
	lists map[string]*replayedList
}

// replayedList is a list event logged in full, replayed.
type replayedList struct {
	decisionID string
	principal  json.RawMessage
	items      []Input
	logged     []listResult
	// blocked says, per item, why the event's mask keeps it from being
	// replayed.
	blocked []string
	// outcomes are its items' replays; reused by its repeats when the
	// policy's decisions cannot depend on what a repeat changes.
	outcomes []itemReplay
}

// itemReplay is one decision replayed: the two outcomes, or why there is
// none.
type itemReplay struct {
	logged, replayed outcome
	notReplayable    string
}

// outcome is a decision as compared: its result's canonical JSON, or the
// message of a denial for an error.
type outcome struct {
	failed bool
	json   string
}

func (o outcome) String() string {
	if o.failed {
		b, _ := auditlog.AppendCanonical(nil, map[string]any{"error": o.json})
		return string(b)
	}
	return o.json
}

func (o outcome) same(p outcome) bool { return o.failed == p.failed && (o.failed || o.json == p.json) }

// loggedEvent is what a replay reads of a record.
type loggedEvent struct {
	DecisionID     string                    `json:"decision_id"`
	Path           string                    `json:"path"`
	Bundles        map[string]BundleRevision `json:"bundles"`
	Input          json.RawMessage           `json:"input"`
	Result         json.RawMessage           `json:"result"`
	Error          *EventError               `json:"error"`
	Erased         []string                  `json:"erased"`
	Masked         []string                  `json:"masked"`
	NDBuiltinCache json.RawMessage           `json:"nd_builtin_cache"`
	Hash           string                    `json:"hash"`
}

func (r *replayer) file(ctx context.Context, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	r.lists = map[string]*replayedList{}
	revisions := map[string]int{}
	rd := bufio.NewReaderSize(f, 1<<16)
	for lineNo := 1; ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, err := rd.ReadBytes('\n')
		if err == io.EOF {
			if len(bytes.TrimSpace(line)) > 0 {
				return &LogProblem{File: name, Line: lineNo, Kind: auditlog.KindTruncated, Detail: "the file ends inside a record (no newline after it)"}
			}
			break
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		var ev loggedEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return &LogProblem{File: name, Line: lineNo, Kind: auditlog.KindMalformed, Detail: "not a decision event: " + err.Error()}
		}
		r.sum.Events++
		if rev := ev.Bundles["mcp-warden"].Revision; rev != r.sum.Revision {
			revisions[rev]++
		}
		r.event(ctx, name, lineNo, &ev)
	}
	for _, rev := range slices.Sorted(maps.Keys(revisions)) {
		r.sum.OtherRevisions = append(r.sum.OtherRevisions, ReplayRevision{File: name, Revision: rev, Events: revisions[rev]})
	}
	return nil
}

// eventHead is what every decision event's input says first.
type eventHead struct {
	Action    Action `json:"action"`
	Principal struct {
		ID string `json:"id"`
	} `json:"principal"`
}

// event replays the decisions of one event and counts them.
func (r *replayer) event(ctx context.Context, file string, line int, ev *loggedEvent) {
	var head eventHead
	at := ReplayFinding{File: file, Line: line, DecisionID: ev.DecisionID}
	notReplayable := func(reason string) {
		at.NotReplayable = reason
		r.sum.Decisions++
		r.sum.NotReplayable++
		r.report(at)
	}
	if ev.Path != EntrypointPath {
		notReplayable(fmt.Sprintf("not a decision of %s (path %q)", EntrypointPath, ev.Path))
		return
	}
	if len(ev.Input) == 0 || string(ev.Input) == "null" {
		if slices.Contains(ev.Erased, "/input") {
			notReplayable("the input was erased by the log mask")
		} else {
			notReplayable("the event has no input")
		}
		return
	}
	if err := json.Unmarshal(ev.Input, &head); err != nil {
		notReplayable("the input is not an input document: " + err.Error())
		return
	}
	at.Action, at.Principal = head.Action, head.Principal.ID
	masks, err := masksOf(ev)
	if err != nil {
		notReplayable(err.Error())
		return
	}
	switch head.Action {
	case ActionToolsList, ActionResourcesList, ActionPromptsList:
		if bytes.HasPrefix(bytes.TrimSpace(ev.Result), []byte(`{"same_as"`)) {
			r.repeat(ctx, at, ev, masks)
		} else {
			r.list(ctx, at, ev, masks)
		}
	default:
		r.single(ctx, at, ev, masks)
	}
}

// masks are the parts of an event the log's mask removed or replaced, as
// paths split by maskPath ("input", "arguments"), with how ("erased" or
// "masked") and as logged.
type masks []mask

type mask struct {
	parts      []string
	how, shown string
}

func masksOf(ev *loggedEvent) (masks, error) {
	var ms masks
	for how, paths := range map[string][]string{"erased": ev.Erased, "masked": ev.Masked} {
		for _, p := range paths {
			parts, err := maskPath(p)
			if err != nil {
				return nil, fmt.Errorf("the event's %s path %q: %w", how, p, err)
			}
			ms = append(ms, mask{parts: parts, how: how, shown: strings.TrimPrefix(p, "/")})
		}
	}
	slices.SortFunc(ms, func(a, b mask) int { return strings.Compare(a.shown, b.shown) })
	return ms, nil
}

// blocking is why a decision on an input of which the mask changed
// inputPaths (each under "input": the paths as an Input has them) cannot be
// replayed, or "" when the policy reads none of them.
func (r *replayer) blocking(m mask, inputPath []string) string {
	if r.engine.fields.reads(inputPath) {
		return fmt.Sprintf("%s %s by the log mask and read by the policy", m.shown, m.how)
	}
	return ""
}

// single replays a decision logged as its own event.
func (r *replayer) single(ctx context.Context, at ReplayFinding, ev *loggedEvent, ms masks) {
	var in Input
	if err := decodeUseNumber(ev.Input, &in); err != nil {
		r.count(at, itemReplay{notReplayable: "the input is not an input document: " + err.Error()})
		return
	}
	at.Item = itemName(in.Tool, in.Resource, in.Prompt)
	ndErased := false
	for _, m := range ms {
		switch m.parts[0] {
		case "input":
			if reason := r.blocking(m, m.parts[1:]); reason != "" {
				r.count(at, itemReplay{notReplayable: reason})
				return
			}
		case "result":
			if ev.Error == nil {
				r.count(at, itemReplay{notReplayable: m.shown + " " + m.how + " by the log mask: the logged decision is not known"})
				return
			}
		case "nd_builtin_cache":
			ndErased = true
		}
	}
	logged := outcome{failed: ev.Error != nil}
	if logged.failed {
		logged.json = ev.Error.Message
	} else {
		b, err := canonicalJSON(ev.Result)
		if err != nil {
			r.count(at, itemReplay{notReplayable: "the result is not JSON: " + err.Error()})
			return
		}
		logged.json = b
	}
	r.count(at, r.replay(ctx, &in, ev.NDBuiltinCache, ndErased, logged))
}

// replay decides in again, its non-deterministic builtins answered from nd,
// as Decider.evaluate does (input reduced to what the policy reads, the
// result read into a Decision), and compares the outcome with logged.
func (r *replayer) replay(ctx context.Context, in *Input, nd []byte, ndErased bool, logged outcome) itemReplay {
	var dec Decision
	var unrecorded []string
	b, err := r.engine.fields.encode(in)
	if err != nil {
		err = fmt.Errorf("encode input: %w", err)
	} else {
		var ev evaluation
		ev, unrecorded, err = r.engine.replay(ctx, b, nd)
		dec, err = decisionOf(in.Action, ev, err)
	}
	if len(unrecorded) > 0 {
		why := "the event's nd_builtin_cache does not hold"
		if ndErased {
			why = "the log mask erased the event's nd_builtin_cache, which held"
		}
		return itemReplay{notReplayable: fmt.Sprintf("the policy calls %s: %s what it returned then", strings.Join(unrecorded, ", "), why)}
	}
	replayed := outcome{failed: err != nil}
	if err != nil {
		replayed.json = err.Error()
	} else {
		j, err := auditlog.AppendCanonical(nil, loggedPart(dec, in.Action))
		if err != nil {
			return itemReplay{notReplayable: "encode the replayed decision: " + err.Error()}
		}
		replayed.json = string(j)
	}
	return itemReplay{logged: logged, replayed: replayed}
}

// loggedPart is the part of dec its event logs: the whole result for a
// single decision, allow, reason and hidden for a list's item.
func loggedPart(dec Decision, action Action) map[string]any {
	switch action {
	case ActionToolsList, ActionResourcesList, ActionPromptsList:
		return Decision{Allow: dec.Allow, Reason: dec.Reason, Hidden: dec.Hidden}.Result()
	}
	return dec.Result()
}

// count adds one decision's replay to the summary and reports it unless
// it is the same.
func (r *replayer) count(at ReplayFinding, ir itemReplay) {
	r.sum.Decisions++
	switch {
	case ir.notReplayable != "":
		r.sum.NotReplayable++
		at.NotReplayable = ir.notReplayable
	case ir.logged.same(ir.replayed):
		r.sum.Same++
		return
	default:
		r.sum.Differ++
		at.Logged, at.Replayed = ir.logged.String(), ir.replayed.String()
	}
	r.report(at)
}

// list replays each item of a list event logged in full.
func (r *replayer) list(ctx context.Context, at ReplayFinding, ev *loggedEvent, ms masks) {
	var li listInput
	var results []listResult
	if err := decodeUseNumber(ev.Input, &li); err != nil {
		r.count(at, itemReplay{notReplayable: "the input is not a list event's input: " + err.Error()})
		return
	}
	if err := decodeUseNumber(ev.Result, &results); err != nil {
		r.count(at, itemReplay{notReplayable: "the result is not a list event's result: " + err.Error()})
		return
	}
	items := li.items()
	if len(items) != len(results) {
		r.count(at, itemReplay{notReplayable: fmt.Sprintf("the input lists %d items and the result %d", len(items), len(results))})
		return
	}
	l := &replayedList{decisionID: ev.DecisionID, items: items, logged: results, outcomes: make([]itemReplay, len(items))}
	if raw, err := rawMember(ev.Input, "principal"); err == nil {
		l.principal = raw
	}
	l.blocked = r.listBlocks(ms, len(items), true)
	for i := range items {
		l.outcomes[i] = r.replayItem(ctx, &items[i], &results[i], l.blocked[i])
		r.count(listItemAt(at, results[i], i, len(items)), l.outcomes[i])
	}
	if ev.Hash != "" {
		r.lists[ev.Hash] = l
	}
}

// repeat replays a list logged as a repeat of a list logged in full: the
// items of that list, with the repeat's own head.
func (r *replayer) repeat(ctx context.Context, at ReplayFinding, ev *loggedEvent, ms masks) {
	var rep listRepeat
	var li listInput
	if err := decodeUseNumber(ev.Result, &rep); err != nil {
		r.count(at, itemReplay{notReplayable: "the result is not a repeat: " + err.Error()})
		return
	}
	if err := decodeUseNumber(ev.Input, &li); err != nil {
		r.count(at, itemReplay{notReplayable: "the input is not a list event's input: " + err.Error()})
		return
	}
	full := r.lists[rep.SameAs.Hash]
	if full == nil || full.decisionID != rep.SameAs.DecisionID {
		r.count(at, itemReplay{notReplayable: fmt.Sprintf("it repeats decision %s (record hash %s), which is not a list event earlier in this file",
			rep.SameAs.DecisionID, rep.SameAs.Hash)})
		return
	}
	principal, _ := rawMember(ev.Input, "principal")
	// A policy whose decisions may be cached reads nothing a repeat
	// changes (its ids and time), so the full list's replay is the
	// repeat's, as the exposure cache made the logged decision the same.
	reuse := r.engine.cacheable() && len(ms) == 0 && bytes.Equal(principal, full.principal)
	blocked := r.listBlocks(ms, len(full.items), false)
	for i, item := range full.items {
		outcome := full.outcomes[i]
		if !reuse {
			in := item
			in.Action, in.Principal, in.RequestID, in.SessionID, in.Time = li.Action, li.Principal, li.RequestID, li.SessionID, li.Time
			outcome = r.replayItem(ctx, &in, &full.logged[i], cmp.Or(full.blocked[i], blocked[i]))
		}
		r.count(listItemAt(at, full.logged[i], i, len(full.items)), outcome)
	}
}

// listBlocks is, per item of a list event of n items, why the mask keeps
// it from being replayed ("" when nothing does). Repeats have no items:
// a path under one is not theirs (withItems false).
func (r *replayer) listBlocks(ms masks, n int, withItems bool) []string {
	blocked := make([]string, n)
	block := func(i int, reason string) {
		if i >= 0 && i < n && blocked[i] == "" {
			blocked[i] = reason
		}
	}
	all := func(reason string) {
		for i := range n {
			block(i, reason)
		}
	}
	for _, m := range ms {
		p := m.parts
		switch {
		case p[0] == "input" && len(p) >= 2 && withItems && (p[1] == "tools" || p[1] == "resources" || p[1] == "prompts"):
			if len(p) == 2 {
				all(m.shown + " " + m.how + " by the log mask")
				continue
			}
			i, err := strconv.Atoi(p[2])
			if err != nil {
				continue
			}
			block(i, r.blocking(m, p[3:]))
		case p[0] == "input":
			if reason := r.blocking(m, p[1:]); reason != "" {
				all(reason)
			}
		case p[0] == "result" && len(p) == 1:
			all(m.shown + " " + m.how + " by the log mask: the logged decisions are not known")
		case p[0] == "result" && withItems:
			i, err := strconv.Atoi(p[1])
			if err != nil {
				continue
			}
			if len(p) >= 3 && p[2] == "nd_builtin_cache" {
				continue // replayed without it; said so if the policy calls for it
			}
			block(i, m.shown+" "+m.how+" by the log mask: the logged decision is not known")
		}
	}
	return blocked
}

// replayItem replays one item of a list, logged as res.
func (r *replayer) replayItem(ctx context.Context, in *Input, res *listResult, blocked string) itemReplay {
	if blocked != "" {
		return itemReplay{notReplayable: blocked}
	}
	logged := outcome{failed: res.Error != ""}
	if logged.failed {
		logged.json = res.Error
	} else {
		j, err := auditlog.AppendCanonical(nil, Decision{Allow: res.Allow, Reason: res.Reason, Hidden: res.Hidden}.Result())
		if err != nil {
			return itemReplay{notReplayable: "the logged decision: " + err.Error()}
		}
		logged.json = string(j)
	}
	var nd []byte
	if res.NDBuiltinCache != nil {
		var err error
		if nd, err = json.Marshal(res.NDBuiltinCache); err != nil {
			return itemReplay{notReplayable: "its nd_builtin_cache: " + err.Error()}
		}
	}
	return r.replay(ctx, in, nd, false, logged)
}

// listItemAt is at for item i of n, logged as res.
func listItemAt(at ReplayFinding, res listResult, i, n int) ReplayFinding {
	name := ""
	switch {
	case res.Tool != "":
		name = "tool " + res.Tool + " "
	case res.Resource != "":
		name = "resource " + res.Resource + " "
	case res.Prompt != "":
		name = "prompt " + res.Prompt + " "
	}
	at.Item = fmt.Sprintf("%s(item %d of %d)", name, i+1, n)
	return at
}

// itemName names the tool, resource or prompt of a single decision.
func itemName(t *Tool, res *Resource, p *Prompt) string {
	switch {
	case t != nil:
		return "tool " + t.Name
	case res != nil:
		return "resource " + res.URI
	case p != nil:
		return "prompt " + p.Name
	}
	return ""
}

// decodeUseNumber decodes b into v keeping numbers as written
// (json.Number), as the gateway holds what clients and servers send.
func decodeUseNumber(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// canonicalJSON is b in the log's canonical form.
func canonicalJSON(b []byte) (string, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return "", err
	}
	c, err := auditlog.AppendCanonical(nil, v)
	return string(c), err
}

// rawMember is the member key of the JSON object b, as written.
func rawMember(b []byte, key string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	return obj[key], nil
}
