package rego

import (
	"context"
	"errors"
	"fmt"

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
