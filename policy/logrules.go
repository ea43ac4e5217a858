package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcp-warden/mcp-warden/rego"
)

// The rules a policy may define to shape its decision log, with OPA's
// semantics (decision_logs.drop_decision / mask_decision defaults).
const (
	// DropRule is true for events that must not be logged.
	DropRule = "data.system.log.drop"
	// MaskRule is a set of JSON pointers to remove, or of {"op": "remove"
	// | "upsert", "path", "value"} objects; paths start with /input or
	// /result.
	MaskRule = "data.system.log.mask"
)

// LogRules are a policy's decision-log rules. Both see the complete,
// unmasked event as input (input.input, input.result, input.labels…). A
// nil *LogRules, or one whose policy defines no mask rule, applies the
// default mask: tools/call arguments are removed ("/input/arguments" in
// the event's "erased"), since they may hold anything a client sends.
type LogRules struct {
	drop, mask *rego.Query
}

// NewLogRules prepares p's drop and mask rules, if it defines them, over
// the same data the decisions are made with. It returns nil, nil when p
// defines neither.
func NewLogRules(ctx context.Context, p *rego.Policy, data map[string]any) (*LogRules, error) {
	var lr LogRules
	var err error
	if lr.drop, err = prepareOptional(ctx, p, DropRule, data); err != nil {
		return nil, err
	}
	if lr.mask, err = prepareOptional(ctx, p, MaskRule, data); err != nil {
		return nil, err
	}
	if lr.drop == nil && lr.mask == nil {
		return nil, nil
	}
	return &lr, nil
}

func prepareOptional(ctx context.Context, p *rego.Policy, rule string, data map[string]any) (*rego.Query, error) {
	q, err := rego.Prepare(ctx, p, rule, data)
	if errors.Is(err, rego.ErrNotDefined) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("decision-log rule: %w", err)
	}
	return q, nil
}

// masksByPolicy reports whether the policy's own mask rule replaces the
// default mask.
func (lr *LogRules) masksByPolicy() bool { return lr != nil && lr.mask != nil }

// apply evaluates drop and mask on ev (whose input still holds the
// arguments) and changes ev accordingly. A failing drop rule keeps the
// event (records are never lost to a policy error); a failing mask rule
// removes the whole input and result, since what it should have hidden is
// unknown. Both failures are noted in the event's "custom" field.
func (lr *LogRules) apply(ctx context.Context, ev *Event) (drop bool, err error) {
	doc, err := json.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("encode event for %s: %w", DropRule, err)
	}
	if lr.drop != nil {
		v, defined, err := lr.drop.Eval(ctx, doc)
		switch {
		case err != nil:
			ev.note("drop_error", err.Error())
		case defined && v == true:
			return true, nil
		}
	}
	if lr.mask == nil {
		return false, nil
	}
	v, defined, err := lr.mask.Eval(ctx, doc)
	if err == nil && defined {
		err = lr.applyMask(ev, v)
	}
	if err != nil {
		ev.Input, ev.Result = nil, nil
		ev.Erased = []string{"/input", "/result"}
		if ev.NDBuiltinCache != nil {
			ev.NDBuiltinCache = nil
			ev.Erased = append(ev.Erased, "/nd_builtin_cache")
		}
		ev.note("mask_error", err.Error())
	}
	return false, nil
}

// applyMask applies the mask rule's value v, in the set's order.
func (lr *LogRules) applyMask(ev *Event, v any) error {
	rules, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%s is %T, want a set", MaskRule, v)
	}
	// Work on a JSON copy of input and result, so nothing the caller still
	// holds (the decision, the arguments) is changed.
	type maskDoc struct {
		Input  any `json:"input"`
		Result any `json:"result"`
		ND     any `json:"nd_builtin_cache"`
	}
	var doc maskDoc
	b, err := json.Marshal(maskDoc{ev.Input, ev.Result, ev.NDBuiltinCache})
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	for _, r := range rules {
		op, path, value := "remove", "", any(nil)
		switch r := r.(type) {
		case string:
			path = r
		case map[string]any:
			op, _ = r["op"].(string)
			path, _ = r["path"].(string)
			value = r["value"]
		default:
			return fmt.Errorf("%s: a rule is %T, want a JSON pointer or an object", MaskRule, r)
		}
		parts, err := maskPath(path)
		if err != nil {
			return err
		}
		root := &doc.Input
		switch parts[0] {
		case "result":
			root = &doc.Result
		case "nd_builtin_cache":
			root = &doc.ND
		}
		var done bool
		switch op {
		case "remove":
			done = removeAt(root, parts[1:])
			if done {
				ev.Erased = append(ev.Erased, path)
			}
		case "upsert":
			done = upsertAt(root, parts[1:], value)
			if done {
				ev.Masked = append(ev.Masked, path)
			}
		default:
			return fmt.Errorf("%s: op %q is not remove or upsert", MaskRule, op)
		}
	}
	ev.Input, ev.Result, ev.NDBuiltinCache = doc.Input, doc.Result, doc.ND
	return nil
}

// maskPath splits a mask path into its unescaped parts; the first is
// "input", "result" or "nd_builtin_cache".
func maskPath(path string) ([]string, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%s: path %q does not start with /", MaskRule, path)
	}
	parts := strings.Split(path[1:], "/")
	if parts[0] != "input" && parts[0] != "result" && parts[0] != "nd_builtin_cache" {
		return nil, fmt.Errorf("%s: path %q is not under /input, /result or /nd_builtin_cache", MaskRule, path)
	}
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, fmt.Errorf("%s: path %q: %w", MaskRule, path, err)
		}
		parts[i] = u
	}
	return parts, nil
}

// removeAt removes the value at parts under *root (an array element is
// cut out, as OPA does); false when the path does not exist, and then
// nothing changes.
func removeAt(root *any, parts []string) bool {
	if len(parts) == 0 {
		if *root == nil {
			return false
		}
		*root = nil
		return true
	}
	switch n := (*root).(type) {
	case map[string]any:
		child, ok := n[parts[0]]
		if !ok {
			return false
		}
		if len(parts) == 1 {
			delete(n, parts[0])
			return true
		}
		ok = removeAt(&child, parts[1:])
		n[parts[0]] = child
		return ok
	case []any:
		i, err := strconv.Atoi(parts[0])
		if err != nil || i < 0 || i >= len(n) {
			return false
		}
		if len(parts) == 1 {
			*root = append(n[:i:i], n[i+1:]...)
			return true
		}
		return removeAt(&n[i], parts[1:])
	}
	return false
}

// upsertAt sets the value at parts under *root, creating missing objects on
// the way; false when the path runs through a non-container.
func upsertAt(root *any, parts []string, value any) bool {
	if len(parts) == 0 {
		*root = value
		return true
	}
	if *root == nil {
		*root = map[string]any{}
	}
	node := *root
	for i, p := range parts {
		lastPart := i == len(parts)-1
		switch n := node.(type) {
		case map[string]any:
			if lastPart {
				n[p] = value
				return true
			}
			child, ok := n[p]
			if !ok || child == nil {
				child = map[string]any{}
				n[p] = child
			}
			node = child
		case []any:
			idx, err := strconv.Atoi(p)
			if err != nil || idx < 0 || idx >= len(n) {
				return false
			}
			if lastPart {
				n[idx] = value
				return true
			}
			node = n[idx]
		default:
			return false
		}
	}
	return false
}
