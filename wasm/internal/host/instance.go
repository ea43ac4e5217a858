package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/mcp-warden/mcp-warden/wasm/internal/preempt"
)

// Format is the encoding opa_eval returns its result set in.
type Format uint64

const (
	// FormatJSON: sets become arrays, non-string object keys strings.
	FormatJSON Format = 0
	// FormatValue: Rego value syntax (sets kept), for ast.ParseTerm.
	FormatValue Format = 1
)

// Config is how an Instance is made.
type Config struct {
	// Data is the JSON data document, parsed once into the instance.
	Data []byte
	// MaxMemoryPages caps the instance's memory (64 KiB pages, below 65536).
	MaxMemoryPages uint32
	// Timeout bounds one evaluation (0: only the caller's context does).
	Timeout time.Duration
	// AllowBuiltin says whether the policy may call the named builtin
	// through the host. A policy that imports a refused builtin does not
	// load.
	AllowBuiltin func(name string) bool
	// RecordNondeterministic makes Eval return what the non-deterministic
	// builtins the evaluation called returned (see Eval).
	RecordNondeterministic bool
}

// Instance is one instantiated policy with its data loaded. It evaluates
// one input at a time: it is not safe for concurrent use.
type Instance struct {
	glue, mod api.Module
	mem       api.Memory
	// ctx is what calls into the module run under: it carries the
	// instance for the host functions and nothing else (the watchdog, not
	// the context, stops an evaluation).
	ctx     context.Context
	timeout time.Duration
	watch   watchdog

	opaEval, malloc, valueDump, valueParse api.Function

	entrypoints map[string]int32
	builtins    map[int32]builtinFunc // id → implementation
	dataAddr    uint32
	evalHeap    uint32 // heap pointer every evaluation starts from

	evalStack []uint64 // opa_eval's parameters and result
	callStack []uint64 // a host builtin's calls back into the policy

	// Per evaluation.
	evalTime    time.Time
	bctx        *topdown.BuiltinContext
	record      bool              // Config.RecordNondeterministic
	nd          builtins.NDBCache // this evaluation's, when recording
	endBuiltins func()
	// broken is set when the instance must not be used again.
	broken bool
}

// NewInstance instantiates m and loads cfg.Data into it.
func (m *Module) NewInstance(ctx context.Context, cfg Config) (_ *Instance, err error) {
	if cfg.MaxMemoryPages == 0 || cfg.MaxMemoryPages > MaxMemoryPages {
		return nil, fmt.Errorf("memory limit of %d pages: want 1 to %d", cfg.MaxMemoryPages, MaxMemoryPages)
	}
	minPages := m.minMemoryPages()
	if minPages > cfg.MaxMemoryPages {
		return nil, fmt.Errorf("the policy needs %d memory pages, above the limit of %d", minPages, cfg.MaxMemoryPages)
	}
	glueCompiled, err := m.rt.glue(ctx, minPages, cfg.MaxMemoryPages)
	if err != nil {
		return nil, err
	}
	in := &Instance{evalStack: make([]uint64, 7), callStack: make([]uint64, 2), timeout: cfg.Timeout, record: cfg.RecordNondeterministic}
	in.ctx = context.WithValue(context.Background(), instanceKey{}, in)
	ctx = context.WithValue(ctx, instanceKey{}, in)
	// Anonymous modules, so that any number of instances share the runtime;
	// the policy's "env" imports resolve to this instance's own glue.
	anonymous := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	if in.glue, err = m.rt.rt.InstantiateModule(ctx, glueCompiled, anonymous); err != nil {
		return nil, fmt.Errorf("instantiate glue: %w", err)
	}
	defer func() {
		if err != nil {
			in.Close(context.WithoutCancel(ctx))
		}
	}()
	resolve := experimental.WithImportResolver(ctx, func(name string) api.Module {
		if name == "env" {
			return in.glue
		}
		return nil
	})
	if in.mod, err = m.rt.rt.InstantiateModule(resolve, m.compiled, anonymous); err != nil {
		return nil, fmt.Errorf("instantiate policy: %w", classify(ctx, err))
	}
	in.mem = in.mod.Memory()
	if in.mem == nil {
		return nil, errors.New("the policy has no memory")
	}
	if err := checkABI(in.mod); err != nil {
		return nil, err
	}
	interrupt, ok := in.mod.ExportedGlobal(preempt.InterruptExport).(api.MutableGlobal)
	if !ok {
		return nil, errors.New("the policy was not compiled by host.Compile: it has no interrupt global")
	}
	in.watch.init(interrupt)
	in.opaEval = in.mod.ExportedFunction("opa_eval")
	in.malloc = in.mod.ExportedFunction("opa_malloc")
	in.valueDump = in.mod.ExportedFunction("opa_value_dump")
	in.valueParse = in.mod.ExportedFunction("opa_value_parse")

	// Heap protocol: initialise the allocator, parse the data once, stash
	// the free blocks so that no evaluation reuses (and corrupts) them, and
	// start every evaluation from the heap pointer after the data.
	if _, err := in.call(ctx, "opa_malloc", 0); err != nil {
		return nil, fmt.Errorf("initialise heap: %w", err)
	}
	if cfg.Data != nil {
		addr, err := in.parseJSON(ctx, cfg.Data)
		if err != nil {
			return nil, fmt.Errorf("load data: %w", err)
		}
		in.dataAddr = addr
	}
	if in.mod.ExportedFunction("opa_heap_blocks_stash") != nil {
		if _, err := in.call(ctx, "opa_heap_blocks_stash"); err != nil {
			return nil, fmt.Errorf("stash heap: %w", err)
		}
	}
	heap, err := in.call(ctx, "opa_heap_ptr_get")
	if err != nil {
		return nil, fmt.Errorf("read heap pointer: %w", err)
	}
	in.evalHeap = uint32(heap)

	names, err := in.dumpJSON(ctx, "builtins")
	if err != nil {
		return nil, err
	}
	if in.builtins, err = bindBuiltins(names, cfg.AllowBuiltin); err != nil {
		return nil, err
	}
	eps, err := in.dumpJSON(ctx, "entrypoints")
	if err != nil {
		return nil, err
	}
	in.entrypoints = make(map[string]int32, len(eps))
	for name, id := range eps {
		in.entrypoints[name] = id
	}
	return in, nil
}

// checkABI accepts ABI 1.2 and later 1.x: opa_eval, which resets the heap on
// every evaluation, came with 1.2.
func checkABI(mod api.Module) error {
	major, minor := mod.ExportedGlobal("opa_wasm_abi_version"), mod.ExportedGlobal("opa_wasm_abi_minor_version")
	if major == nil || minor == nil {
		return errors.New("not an OPA policy module: no ABI version")
	}
	if ma, mi := int32(major.Get()), int32(minor.Get()); ma != 1 || mi < 2 {
		return fmt.Errorf("unsupported OPA Wasm ABI version %d.%d: supported are 1.2 and later 1.x (OPA 0.31 and later)", ma, mi)
	}
	return nil
}

// Entrypoints maps the policy's entry point names (slash form,
// "mcp/warden/decision") to the ids Eval takes.
func (in *Instance) Entrypoints() map[string]int32 { return in.entrypoints }

// Broken reports whether the instance was interrupted (deadline or
// cancellation), trapped or ran out of memory, and must be replaced.
func (in *Instance) Broken() bool { return in.broken }

// Nondeterministic returns, for the last evaluation of an instance whose
// Config records them, what each non-deterministic builtin it called
// returned, by builtin and arguments (the nd_builtin_cache of OPA's
// decision log); nil when it called none.
func (in *Instance) Nondeterministic() builtins.NDBCache { return in.nd }

// MemoryPages is the current size of the instance's memory.
func (in *Instance) MemoryPages() uint32 { return in.mem.Size() / pageSize }

const pageSize = 65536

// Eval evaluates entrypoint with input (JSON, or Rego value syntax; nil for
// no input) and returns the result set: [{"result": value}] for an entry
// point of a built bundle, [] when undefined. Builtins see now as the time.
//
// The result is copied out of the instance's memory. Every evaluation
// starts from the same heap pointer, so memory does not grow from one
// evaluation to the next. The Config's Timeout (ErrTimeout) or the end of
// ctx (its cause) stops the evaluation and breaks the instance (see Broken).
func (in *Instance) Eval(ctx context.Context, entrypoint int32, input []byte, format Format, now time.Time) (_ []byte, err error) {
	if in.broken {
		return nil, errors.New("evaluate: instance is broken")
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	in.evalTime, in.bctx, in.nd = now, nil, nil
	in.watch.arm(ctx, in.timeout)
	defer func() {
		if in.endBuiltins != nil {
			in.endBuiltins()
			in.endBuiltins = nil
		}
		in.bctx = nil
		if cause := in.watch.disarm(); cause != nil {
			// Interrupted: whatever the call returned, the interrupt
			// global is set and the instance cannot run again.
			in.broken = true
			err = cause
		}
	}()

	heap, inputAddr, inputLen := in.evalHeap, uint32(0), uint32(0)
	if input != nil {
		inputAddr, inputLen = heap, uint32(len(input))
		if err := in.ensureMemory(uint64(heap) + uint64(inputLen)); err != nil {
			return nil, err
		}
		in.mem.Write(inputAddr, input)
		heap += inputLen
	}
	s := in.evalStack
	s[0], s[1], s[2], s[3], s[4], s[5], s[6] = 0, uint64(uint32(entrypoint)), uint64(in.dataAddr), uint64(inputAddr), uint64(inputLen), uint64(heap), uint64(format)
	if err := in.opaEval.CallWithStack(in.ctx, s); err != nil {
		return nil, classify(in.ctx, err)
	}
	out, err := in.readString(uint32(s[0]))
	if err != nil {
		return nil, err
	}
	return bytes.Clone(out), nil
}

// ensureMemory grows memory to hold end bytes, within the page cap.
func (in *Instance) ensureMemory(end uint64) error {
	if size := uint64(in.mem.Size()); end > size {
		pages := (end - size + pageSize - 1) / pageSize
		if _, ok := in.mem.Grow(uint32(pages)); !ok {
			return ErrMemoryLimit
		}
	}
	return nil
}

// readString returns the NUL-terminated string at addr, as a view of memory
// that the next call into the instance may invalidate.
func (in *Instance) readString(addr uint32) ([]byte, error) {
	size := in.mem.Size()
	if addr >= size {
		return nil, fmt.Errorf("string address %d outside memory of %d bytes", addr, size)
	}
	b, _ := in.mem.Read(addr, size-addr)
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return nil, fmt.Errorf("unterminated string at %d", addr)
	}
	return b[:n:n], nil
}

// call calls an exported function that takes and returns i32s.
func (in *Instance) call(ctx context.Context, name string, params ...uint64) (uint64, error) {
	f := in.mod.ExportedFunction(name)
	if f == nil {
		return 0, fmt.Errorf("policy does not export %s", name)
	}
	res, err := f.Call(ctx, params...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, classify(ctx, err))
	}
	if len(res) == 0 {
		return 0, nil
	}
	return res[0], nil
}

// parseJSON copies JSON into the instance and parses it into a value.
func (in *Instance) parseJSON(ctx context.Context, doc []byte) (uint32, error) {
	addr, err := in.call(ctx, "opa_malloc", uint64(len(doc)))
	if err != nil {
		return 0, err
	}
	if !in.mem.Write(uint32(addr), doc) {
		return 0, ErrMemoryLimit
	}
	v, err := in.call(ctx, "opa_json_parse", addr, uint64(len(doc)))
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, errors.New("not valid JSON")
	}
	if _, err := in.call(ctx, "opa_free", addr); err != nil {
		return 0, err
	}
	return uint32(v), nil
}

// dumpJSON calls fn, which returns a value mapping names to ids, and reads it.
func (in *Instance) dumpJSON(ctx context.Context, fn string) (map[string]int32, error) {
	v, err := in.call(ctx, fn)
	if err != nil {
		return nil, err
	}
	str, err := in.call(ctx, "opa_json_dump", v)
	if err != nil {
		return nil, err
	}
	raw, err := in.readString(uint32(str))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	var m map[string]int32
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	return m, nil
}

// Close releases the instance's memory.
func (in *Instance) Close(ctx context.Context) {
	in.broken = true
	if in.watch.timer != nil {
		in.watch.timer.Stop()
	}
	if in.mod != nil {
		_ = in.mod.Close(ctx)
	}
	if in.glue != nil {
		_ = in.glue.Close(ctx)
	}
}

// ErrTimeout, ErrMemoryLimit and *AbortError are the evaluation failures a
// caller branches on.
var (
	ErrTimeout     = errors.New("policy evaluation timed out")
	ErrMemoryLimit = errors.New("policy evaluation exceeded the memory limit")
)

// AbortError is an evaluation the policy aborted, such as a conflict between
// values of a complete rule ("var assignment conflict").
type AbortError struct{ Message string }

func (e *AbortError) Error() string { return "policy aborted: " + e.Message }

// classify maps what a call into the instance returned to the errors above,
// and marks the instance broken when it cannot be used again.
func classify(ctx context.Context, err error) error {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	broken := func() {
		if in != nil {
			in.broken = true
		}
	}
	if _, ok := errors.AsType[*sys.ExitError](err); ok {
		broken() // wazero closed the module
		return err
	}
	if abort, ok := errors.AsType[*AbortError](err); ok {
		if abort.Message == "opa_malloc: failed" {
			// Out of pages: replace the instance rather than trust an
			// allocator that just failed.
			broken()
			return ErrMemoryLimit
		}
		return abort
	}
	if be, ok := errors.AsType[*BuiltinError](err); ok {
		return be
	}
	// Any other trap (unreachable, stack overflow, out-of-bounds access)
	// leaves state we cannot vouch for.
	broken()
	return fmt.Errorf("policy trapped: %w", err)
}
