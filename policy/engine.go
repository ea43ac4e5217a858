package policy

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/mcp-warden/mcp-warden/rego"
)

// Engine evaluates the decision entry point on one JSON input document.
// Implementations are prepared once and are safe for concurrent use.
type Engine interface {
	// Evaluate returns the entry point's value for input, or ErrUndefined.
	Evaluate(ctx context.Context, input []byte) (any, error)
	// Revision identifies the exact policy and data being evaluated.
	Revision() string
}

// ErrUndefined is returned by an Engine when the entry point has no value
// for an input. The Decider turns it into a denial.
var ErrUndefined = errors.New("policy decision is undefined")

// EngineRego names OPA's topdown evaluator in configuration.
const EngineRego = "rego"

// NewRegoEngine prepares the decision entry point of p with OPA's topdown
// evaluator. data is merged into the policy's data at the root (the gateway
// puts its per-server allow and block lists under data.warden).
func NewRegoEngine(ctx context.Context, p *rego.Policy, data map[string]any) (Engine, error) {
	q, err := rego.Prepare(ctx, p, Entrypoint, data)
	if err != nil {
		return nil, fmt.Errorf("prepare policy: %w", err)
	}
	return &regoEngine{query: q, revision: p.Revision(), reusable: !p.Volatile(VolatileInputFields...),
		records: p.Volatile(), fields: newInputFields(p.InputPaths())}, nil
}

type regoEngine struct {
	query    *rego.Query
	revision string
	reusable bool // decisions depend on the input's non-volatile fields and data only
	records  bool // the policy may call non-deterministic builtins: record them
	fields   inputFields
}

func (e *regoEngine) cacheable() bool { return e.reusable }

func (e *regoEngine) inputFields() inputFields { return e.fields }

func (e *regoEngine) Evaluate(ctx context.Context, input []byte) (any, error) {
	v, defined, err := e.query.Eval(ctx, input)
	if err != nil {
		return nil, err
	}
	if !defined {
		return nil, ErrUndefined
	}
	return v, nil
}

func (e *regoEngine) evaluatePruned(ctx context.Context, input []byte) (evaluation, error) {
	if !e.records {
		v, err := e.Evaluate(ctx, input)
		return evaluation{value: v}, err
	}
	v, defined, nd, err := e.query.EvalRecorded(ctx, input)
	if err == nil && !defined {
		err = ErrUndefined
	}
	if err != nil {
		return evaluation{}, err
	}
	return evaluation{value: v, nondeterministic: nd}, nil
}

// replay evaluates input, reduced to inputFields, with the policy's
// non-deterministic builtins answered from nd (a logged nd_builtin_cache),
// and names those it called with arguments nd does not hold.
func (e *regoEngine) replay(ctx context.Context, input, nd []byte) (evaluation, []string, error) {
	v, defined, unrecorded, err := e.query.EvalReplayed(ctx, input, nd)
	if err == nil && !defined {
		err = ErrUndefined
	}
	return evaluation{value: v}, unrecorded, err
}

// concurrency: a prepared query evaluates on any number of goroutines.
func (e *regoEngine) concurrency() int { return runtime.GOMAXPROCS(0) }

func (e *regoEngine) Revision() string { return e.revision }
