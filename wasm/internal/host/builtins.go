package host

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/open-policy-agent/opa/v1/util"
	"github.com/tetratelabs/wazero/api"
)

// builtinFunc is a builtin the policy calls through the host.
type builtinFunc struct {
	name string
	fn   topdown.BuiltinFunc
	// nondeterministic builtins (time.now_ns, rand.intn, uuid.rfc4122, …)
	// have their results recorded when the instance records them.
	nondeterministic bool
}

// BuiltinError is a builtin that halted the evaluation (topdown.Halt), or
// whose arguments or result could not cross the Wasm boundary. Other builtin
// errors make the call undefined, as in OPA's Wasm evaluation.
type BuiltinError struct {
	Name string
	Err  error
}

func (e *BuiltinError) Error() string { return fmt.Sprintf("builtin %s: %v", e.Name, e.Err) }
func (e *BuiltinError) Unwrap() error { return e.Err }

// bindBuiltins maps the ids of the builtins the policy imports (its
// builtins() object) to OPA's implementations, refusing those allow refuses.
func bindBuiltins(names map[string]int32, allow func(string) bool) (map[int32]builtinFunc, error) {
	bound := make(map[int32]builtinFunc, len(names))
	var refused []string
	for name, id := range names {
		if allow != nil && !allow(name) {
			refused = append(refused, name)
			continue
		}
		fn := topdown.GetBuiltin(name)
		if fn == nil {
			return nil, fmt.Errorf("the policy calls builtin %s, which this OPA version does not implement", name)
		}
		b := ast.BuiltinMap[name]
		bound[id] = builtinFunc{name: name, fn: fn, nondeterministic: b != nil && b.Nondeterministic}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return nil, fmt.Errorf("the policy calls builtins the gateway refuses (I/O or non-hermetic): %v", refused)
	}
	return bound, nil
}

// capabilities are given to builtins and to the parser of their arguments;
// building them is costly (OPA rebuilds them for every ast.ParseTerm).
var capabilities = sync.OnceValue(func() *ast.Capabilities { return ast.CapabilitiesForThisVersion() })

// builtinDispatcher returns the host function opa_builtin<arity>:
// (id, ctx, a1..a<arity>) -> value address, 0 for undefined.
func builtinDispatcher(arity int) api.GoModuleFunc {
	return func(ctx context.Context, _ api.Module, stack []uint64) {
		in := instanceOf(ctx)
		if in.watch.stopped() {
			panic(errInterrupted) // Eval reports the watchdog's cause
		}
		id := int32(uint32(stack[0]))
		b, ok := in.builtins[id]
		if !ok {
			panic(&AbortError{Message: fmt.Sprintf("call of unknown builtin id %d", id)})
		}
		args := make([]*ast.Term, arity)
		for i := range arity {
			t, err := in.termAt(ctx, uint32(stack[2+i]))
			if err != nil {
				panic(&BuiltinError{Name: b.name, Err: fmt.Errorf("argument %d: %w", i+1, err)})
			}
			args[i] = t
		}
		var out *ast.Term
		err := b.fn(*in.builtinContext(), args, func(t *ast.Term) error {
			out = t
			return nil
		})
		if in.watch.stopped() {
			panic(errInterrupted)
		}
		if err != nil {
			if _, halt := errors.AsType[topdown.Halt](err); halt {
				panic(&BuiltinError{Name: b.name, Err: err})
			}
			out = nil // non-halting errors are undefined in Wasm evaluation
		}
		stack[0] = 0
		if out != nil && b.nondeterministic && in.record {
			if in.nd == nil {
				in.nd = builtins.NDBCache{}
			}
			in.nd.Put(b.name, ast.NewArray(args...), out.Value)
		}
		if out != nil {
			addr, err := in.writeTerm(ctx, out)
			if err != nil {
				panic(&BuiltinError{Name: b.name, Err: fmt.Errorf("result: %w", err)})
			}
			stack[0] = uint64(addr)
		}
	}
}

// builtinContext returns the evaluation's BuiltinContext, made on the first
// builtin call so that evaluations that call none do not pay for it. Its
// time is the evaluation's fixed time.
func (in *Instance) builtinContext() *topdown.BuiltinContext {
	if in.bctx != nil {
		return in.bctx
	}
	// A builtin running in Go when the watchdog stops the evaluation sees
	// its context end and topdown's Cancel.
	cancel := topdown.NewCancel()
	ctx, end := in.watch.builtinContext(cancel.Cancel)
	in.endBuiltins = end
	in.bctx = &topdown.BuiltinContext{
		Context:      ctx,
		Metrics:      metrics.NoOp(),
		Seed:         rand.Reader,
		Time:         ast.NumberTerm(json.Number(strconv.FormatInt(in.evalTime.UnixNano(), 10))),
		Cancel:       cancel,
		Cache:        builtins.Cache{},
		Capabilities: capabilities(),
	}
	return in.bctx
}

// errInterrupted stops a builtin call of an interrupted evaluation; Eval
// reports the watchdog's cause instead.
var errInterrupted = errors.New("evaluation interrupted")

// termAt reads the value at addr as an AST term.
func (in *Instance) termAt(ctx context.Context, addr uint32) (*ast.Term, error) {
	in.callStack[0] = uint64(addr)
	if err := in.valueDump.CallWithStack(ctx, in.callStack[:1]); err != nil {
		return nil, err
	}
	s, err := in.readString(uint32(in.callStack[0]))
	if err != nil {
		return nil, err
	}
	// Most arguments are JSON (no set, only string keys): decoding JSON is
	// several times cheaper than the Rego parser, which the rest needs.
	if utf8.Valid(s) && json.Valid(s) {
		var x any
		if err := util.UnmarshalJSON(s, &x); err == nil {
			if v, err := ast.InterfaceToValue(x); err == nil {
				return ast.NewTerm(v), nil
			}
		}
	}
	body, err := ast.ParseBodyWithOpts(string(s), ast.ParserOptions{Capabilities: capabilities()})
	if err != nil {
		return nil, err
	}
	if len(body) != 1 {
		return nil, fmt.Errorf("value dump %q is not one term", s)
	}
	t, ok := body[0].Terms.(*ast.Term)
	if !ok {
		return nil, fmt.Errorf("value dump %q is not a term", s)
	}
	return t, nil
}

// writeTerm copies t into the instance as a value and returns its address.
func (in *Instance) writeTerm(ctx context.Context, t *ast.Term) (uint32, error) {
	raw := t.String()
	in.callStack[0] = uint64(len(raw))
	if err := in.malloc.CallWithStack(ctx, in.callStack[:1]); err != nil {
		return 0, err
	}
	addr := uint32(in.callStack[0])
	if !in.mem.WriteString(addr, raw) {
		return 0, ErrMemoryLimit
	}
	in.callStack[0], in.callStack[1] = uint64(addr), uint64(len(raw))
	if err := in.valueParse.CallWithStack(ctx, in.callStack[:2]); err != nil {
		return 0, err
	}
	return uint32(in.callStack[0]), nil
}

// opaAbort is opa_abort(message): the policy gave up the evaluation.
func opaAbort(ctx context.Context, _ api.Module, stack []uint64) {
	in := instanceOf(ctx)
	msg, err := in.readString(uint32(stack[0]))
	if err != nil {
		panic(&AbortError{Message: "(unreadable abort message)"})
	}
	panic(&AbortError{Message: string(msg)})
}

// opaPrintln is imported by debug builds of the policy only.
func opaPrintln(ctx context.Context, _ api.Module, stack []uint64) {
	in := instanceOf(ctx)
	if msg, err := in.readString(uint32(stack[0])); err == nil {
		fmt.Fprintf(os.Stderr, "%s\n", msg)
	}
}
