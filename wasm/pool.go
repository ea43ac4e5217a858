package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/mcp-warden/mcp-warden/wasm/internal/host"
)

// Errors of Pool.Eval a caller branches on (with errors.Is). An evaluation
// that fails with ErrTimeout or ErrMemoryLimit has had its instance
// replaced; the Pool keeps serving.
var (
	// ErrUndefined: the entry point has no value for the input.
	ErrUndefined = errors.New("policy decision is undefined")
	// ErrTimeout: the evaluation ran past PoolOptions.Timeout.
	ErrTimeout = host.ErrTimeout
	// ErrMemoryLimit: the evaluation needed more than PoolOptions.MemoryLimitPages.
	ErrMemoryLimit = host.ErrMemoryLimit
)

// RefusedBuiltins are the builtins a policy may not call: they reach the
// network, the environment or the process. rego.CompileWasm leaves them out
// of the capabilities, and NewPool refuses a policy that imports one.
var RefusedBuiltins = []string{"http.send", "net.lookup_ip_addr", "opa.runtime"}

// Defaults and bounds of PoolOptions.
const (
	DefaultMemoryLimitPages = 1024 // 64 MiB per instance
	DefaultTimeout          = time.Second
	// MaxMemoryLimitPages is just under 4 GiB: wazero reports the size of
	// a full 65536-page memory as 0.
	MaxMemoryLimitPages = host.MaxMemoryPages
)

// PoolOptions says how a Pool evaluates.
type PoolOptions struct {
	// Entrypoint is the entry point evaluated, in slash form
	// ("mcp/warden/decision"); the module must have been built with it.
	Entrypoint string
	// Data is the JSON data document every evaluation sees as data (an
	// object, or nil for none).
	Data []byte
	// Size is the number of instances, hence of concurrent evaluations.
	// Zero means GOMAXPROCS.
	Size int
	// MemoryLimitPages caps each instance's memory in 64 KiB pages. Zero
	// means DefaultMemoryLimitPages; at most MaxMemoryLimitPages.
	MemoryLimitPages uint32
	// Timeout bounds one evaluation. Zero means DefaultTimeout.
	Timeout time.Duration
	// RecordNondeterministic makes EvalRecorded return what the
	// non-deterministic builtins of each evaluation returned.
	RecordNondeterministic bool
}

// Pool evaluates one entry point of a Module on a bounded set of
// instances, each evaluating one input at a time. It is safe for
// concurrent use; Eval waits for a free instance.
type Pool struct {
	module     *Module
	cfg        host.Config
	entrypoint string
	epID       int32
	// free holds Size slots: a ready instance, or nil for one to make
	// (after a broken instance was discarded).
	free chan *host.Instance

	closeOnce sync.Once
}

// NewPool makes opts.Size instances of m with opts.Data loaded. It fails if
// the data is not a JSON object, the module lacks the entry point, speaks
// an unsupported ABI version, or calls a builtin that is refused or
// unknown.
func NewPool(ctx context.Context, m *Module, opts PoolOptions) (*Pool, error) {
	if m == nil {
		return nil, errors.New("wasm pool: nil module")
	}
	if opts.Entrypoint == "" {
		return nil, errors.New("wasm pool: no entry point")
	}
	if opts.Data != nil && !bytes.HasPrefix(bytes.TrimSpace(opts.Data), []byte("{")) {
		return nil, errors.New("wasm pool: data is not a JSON object")
	}
	p := &Pool{
		module:     m,
		entrypoint: opts.Entrypoint,
		cfg: host.Config{
			Data:           opts.Data,
			MaxMemoryPages: opts.MemoryLimitPages,
			Timeout:        opts.Timeout,
			AllowBuiltin:   allowBuiltin,

			RecordNondeterministic: opts.RecordNondeterministic,
		},
	}
	if p.cfg.MaxMemoryPages == 0 {
		p.cfg.MaxMemoryPages = DefaultMemoryLimitPages
	}
	if p.cfg.Timeout <= 0 {
		p.cfg.Timeout = DefaultTimeout
	}
	size := opts.Size
	if size <= 0 {
		size = runtime.GOMAXPROCS(0)
	}
	p.free = make(chan *host.Instance, size)
	first, err := m.compiled.NewInstance(ctx, p.cfg)
	if err != nil {
		return nil, fmt.Errorf("wasm pool: %w", err)
	}
	id, ok := first.Entrypoints()[opts.Entrypoint]
	if !ok {
		first.Close(ctx)
		return nil, fmt.Errorf("wasm pool: the module has no entry point %s (it has %v)",
			opts.Entrypoint, slices.Sorted(maps.Keys(first.Entrypoints())))
	}
	p.epID = id
	p.free <- first
	for range size - 1 {
		in, err := m.compiled.NewInstance(ctx, p.cfg)
		if err != nil {
			for len(p.free) > 0 {
				(<-p.free).Close(ctx)
			}
			return nil, fmt.Errorf("wasm pool: %w", err)
		}
		p.free <- in
	}
	return p, nil
}

func allowBuiltin(name string) bool { return !slices.Contains(RefusedBuiltins, name) }

// Size is the number of instances: how many evaluations run at once.
func (p *Pool) Size() int { return cap(p.free) }

// Eval evaluates the entry point with input, a JSON document, and returns
// the entry point's value as JSON (sets as arrays), or ErrUndefined. Time
// builtins see the moment Eval started. It waits for a free instance as
// long as ctx allows; the evaluation itself is bounded by the pool's
// Timeout.
func (p *Pool) Eval(ctx context.Context, input []byte) ([]byte, error) {
	value, _, err := p.EvalRecorded(ctx, input)
	return value, err
}

// EvalRecorded is Eval that also returns, when the pool records them
// (PoolOptions.RecordNondeterministic), what the non-deterministic builtins
// the evaluation called (time.now_ns, rand.intn, …) returned, as the JSON
// of OPA's decision log nd_builtin_cache: {"builtin": {"[args]": value}};
// nd is nil when it called none. A replay given these values decides as
// the evaluation did.
func (p *Pool) EvalRecorded(ctx context.Context, input []byte) (value, nd []byte, err error) {
	now := time.Now()
	var in *host.Instance
	select {
	case in = <-p.free: // most often an instance is free: no need to watch ctx
	default:
		select {
		case in = <-p.free:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("wait for a wasm instance: %w", context.Cause(ctx))
		}
	}
	if in == nil { // a slot whose instance was discarded
		if in, err = p.module.compiled.NewInstance(ctx, p.cfg); err != nil {
			p.free <- nil
			return nil, nil, fmt.Errorf("replace wasm instance: %w", err)
		}
	}
	out, err := in.Eval(ctx, p.epID, input, host.FormatJSON, now)
	if cache := in.Nondeterministic(); err == nil && cache != nil {
		if nd, err = cache.MarshalJSON(); err != nil {
			err = fmt.Errorf("record non-deterministic builtins: %w", err)
		}
	}
	if in.Broken() {
		in.Close(context.WithoutCancel(ctx))
		in = nil
	}
	p.free <- in
	if err != nil {
		return nil, nil, err
	}
	value, err = resultValue(out)
	return value, nd, err
}

// resultValue returns X of the result set [{"result":X}] opa_eval returns
// for an entry point, or ErrUndefined for [].
func resultValue(rs []byte) ([]byte, error) {
	const prefix, suffix = `[{"result":`, `}]`
	switch {
	case string(rs) == "[]":
		return nil, ErrUndefined
	case bytes.HasPrefix(rs, []byte(prefix)) && bytes.HasSuffix(rs, []byte(suffix)):
		return rs[len(prefix) : len(rs)-len(suffix)], nil
	}
	return nil, fmt.Errorf("unexpected result set %.100q", rs)
}

// Close closes every instance, waiting for evaluations in progress.
func (p *Pool) Close(ctx context.Context) {
	p.closeOnce.Do(func() {
		for range cap(p.free) {
			if in := <-p.free; in != nil {
				in.Close(ctx)
			}
		}
	})
}
