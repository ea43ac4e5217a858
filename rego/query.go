package rego

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/mcp-warden/mcp-warden/rego/internal/jsonast"
)

// ErrNotDefined is returned (wrapped) by Prepare for a rule that neither
// the policy's modules nor its data define, so that callers preparing
// optional rules can tell absence from a broken policy.
var ErrNotDefined = errors.New("no rule or data of the policy defines it")

// Query is one rule of one policy, compiled once and evaluated many times.
// It is safe for concurrent use.
type Query struct {
	rule     string
	prepared oparego.PreparedEvalQuery
}

// Prepare compiles policy p, with data merged into its base data at the
// root, for evaluating rule (a ground reference into data, such as
// "data.mcp.warden.decision").
//
// data is typically {"warden": {"servers": {...}}}; any value that
// encoding/json can marshal is accepted. A path that both p's data and
// data define (other than objects, which merge) is an error, as is a rule
// that neither p's modules nor its data define.
//
// Preparing costs a full compilation of the policy; do it once per policy
// and reuse the Query.
func Prepare(ctx context.Context, p *Policy, rule string, data map[string]any) (*Query, error) {
	if p == nil {
		return nil, errors.New("prepare: nil policy")
	}
	if p.err != nil {
		return nil, fmt.Errorf("prepare %s: %w", rule, p.err)
	}
	ref, err := ast.ParseRef(rule)
	if err != nil || !ref.HasPrefix(ast.DefaultRootRef) || !ref.IsGround() {
		return nil, fmt.Errorf("prepare %q: not a rule reference such as data.mcp.warden.decision", rule)
	}

	var extra any = data
	if err := util.RoundTrip(&extra); err != nil {
		return nil, fmt.Errorf("prepare %s: data: %w", rule, err)
	}
	extraData, _ := extra.(map[string]any)
	merged, err := mergeData(p.data, extraData)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: data: %w (set by both the policy and the gateway)", rule, err)
	}

	// The store hands data to the evaluator as AST values, so that they are
	// not converted again on every evaluation.
	store := inmem.NewFromObjectWithOpts(merged, inmem.OptReturnASTValuesOnRead(true))
	compiler := newCompiler(false)
	opts := []func(*oparego.Rego){
		oparego.Query(ref.String()),
		oparego.Compiler(compiler),
		oparego.Store(store),
	}
	for _, m := range p.modules {
		opts = append(opts, oparego.ParsedModule(m.parsed))
	}
	prepared, err := oparego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", rule, regoErrors(err))
	}
	if len(compiler.GetRules(ref)) == 0 && !definedIn(merged, ref) {
		return nil, fmt.Errorf("prepare %s: %w", rule, ErrNotDefined)
	}
	return &Query{rule: ref.String(), prepared: prepared}, nil
}

// definedIn reports whether data holds a value at ref (data.a.b...).
func definedIn(data map[string]any, ref ast.Ref) bool {
	var v any = data
	for _, t := range ref[1:] {
		obj, ok := v.(map[string]any)
		key, isString := t.Value.(ast.String)
		if !ok || !isString {
			return false
		}
		if v, ok = obj[string(key)]; !ok {
			return false
		}
	}
	return true
}

// Eval evaluates the query's rule with input, a JSON document, as input.
//
// The result is plain JSON values: map[string]any, []any, string, bool,
// nil, and json.Number for numbers. defined is false when the rule has no
// value for this input (result is then nil). A malformed input, a done ctx,
// or an evaluation error such as a conflict between rule values, is an
// error.
//
// The input is decoded straight into OPA's AST, and evaluation starts no
// goroutine: ctx is watched through context.AfterFunc.
func (q *Query) Eval(ctx context.Context, input []byte) (result any, defined bool, err error) {
	return q.eval(ctx, input, nil)
}

// EvalRecorded is Eval that also returns what the non-deterministic
// builtins the evaluation called (time.now_ns, rand.intn, …) returned, as
// the JSON of OPA's decision log nd_builtin_cache: {"builtin": {"[args]":
// value}}; nd is nil when it called none.
func (q *Query) EvalRecorded(ctx context.Context, input []byte) (result any, defined bool, nd []byte, err error) {
	cache := builtins.NDBCache{}
	result, defined, err = q.eval(ctx, input, cache)
	if err == nil && len(cache) > 0 {
		if nd, err = cache.MarshalJSON(); err != nil {
			return nil, false, nil, fmt.Errorf("eval %s: record non-deterministic builtins: %w", q.rule, err)
		}
	}
	return result, defined, nd, err
}

// EvalReplayed is Eval with the non-deterministic builtins answered from
// nd, an nd_builtin_cache as EvalRecorded returns it and decision logs hold
// it ({"builtin": {"[args]": value}}; nil or empty: none), so that an
// evaluation replayed from a log decides as the logged one did. unrecorded
// names, sorted, the non-deterministic builtins the evaluation called with
// arguments nd does not hold: their results are fresh, not the logged ones.
func (q *Query) EvalReplayed(ctx context.Context, input, nd []byte) (result any, defined bool, unrecorded []string, err error) {
	cache, err := ndCacheOf(nd)
	if err != nil {
		return nil, false, nil, fmt.Errorf("eval %s: nd_builtin_cache: %w", q.rule, err)
	}
	held := make(map[string]int, len(cache))
	for name, calls := range cache {
		held[name] = calls.Len()
	}
	result, defined, err = q.eval(ctx, input, cache)
	for name, calls := range cache {
		if calls.Len() > held[name] {
			unrecorded = append(unrecorded, name)
		}
	}
	slices.Sort(unrecorded)
	return result, defined, unrecorded, err
}

// ndCacheOf decodes an nd_builtin_cache. OPA writes each call's arguments
// as the JSON of their array, as an object key; topdown looks calls up by
// the array itself, so each key is decoded back into one (OPA's own
// NDBCache.UnmarshalJSON keeps it a string, which no call matches).
func ndCacheOf(nd []byte) (builtins.NDBCache, error) {
	cache := builtins.NDBCache{}
	if len(nd) == 0 {
		return cache, nil
	}
	var byBuiltin map[string]map[string]any
	if err := util.UnmarshalJSON(nd, &byBuiltin); err != nil {
		return nil, err
	}
	for name, calls := range byBuiltin {
		for key, value := range calls {
			var args any
			if err := util.UnmarshalJSON([]byte(key), &args); err != nil {
				return nil, fmt.Errorf("%s: arguments %q: %w", name, key, err)
			}
			argsValue, err := ast.InterfaceToValue(args)
			if err != nil {
				return nil, fmt.Errorf("%s: arguments %q: %w", name, key, err)
			}
			if _, ok := argsValue.(*ast.Array); !ok {
				return nil, fmt.Errorf("%s: arguments %q are not an array", name, key)
			}
			v, err := ast.InterfaceToValue(value)
			if err != nil {
				return nil, fmt.Errorf("%s: result of %s: %w", name, key, err)
			}
			cache.Put(name, argsValue, v)
		}
	}
	return cache, nil
}

func (q *Query) eval(ctx context.Context, input []byte, cache builtins.NDBCache) (result any, defined bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("eval %s: %w", q.rule, err)
	}
	value, err := jsonast.Parse(input)
	if err != nil {
		return nil, false, fmt.Errorf("eval %s: input: %w", q.rule, err)
	}
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	opts := []oparego.EvalOption{
		oparego.EvalParsedInput(value),
		oparego.EvalExternalCancel(cancel),
		oparego.EvalMetrics(metrics.NoOp()),
	}
	if cache != nil {
		opts = append(opts, oparego.EvalNDBuiltinCache(cache))
	}
	rs, err := q.prepared.Eval(ctx, opts...)
	if err != nil {
		return nil, false, fmt.Errorf("eval %s: %w", q.rule, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, false, nil
	}
	return rs[0].Expressions[0].Value, true, nil
}
