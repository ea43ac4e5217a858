package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/wasm"
)

// EngineWasm names mcp-warden's WebAssembly host in configuration.
const EngineWasm = "wasm"

// Bounds of WasmOptions.MemoryLimitPages, in 64 KiB pages.
const (
	DefaultWasmMemoryLimitPages = wasm.DefaultMemoryLimitPages
	MaxWasmMemoryLimitPages     = wasm.MaxMemoryLimitPages
)

// WasmOptions tunes a Wasm engine; the zero value is the default.
type WasmOptions struct {
	// CacheDir keeps compiled machine code across restarts; empty means
	// DefaultWasmCacheDir, "-" keeps it in memory only. An existing
	// directory must belong to the process's user and be writable by no
	// one else: whoever can write it can run code in the process.
	CacheDir string
	// Instances bounds concurrent evaluations; zero means GOMAXPROCS.
	Instances int
	// Timeout bounds one evaluation; zero means wasm.DefaultTimeout.
	Timeout time.Duration
	// MemoryLimitPages caps each instance's memory in 64 KiB pages; zero
	// means DefaultWasmMemoryLimitPages, at most MaxWasmMemoryLimitPages.
	MemoryLimitPages uint32
}

// DefaultWasmCacheDir is where compiled policies are cached: the user's
// cache directory (e.g. ~/.cache/mcp-warden/wasm), or "" when there is none.
func DefaultWasmCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "mcp-warden", "wasm")
}

// NewWasmEngine makes an Engine that evaluates the decision entry point of
// wp (built with it: see rego.CompileWasm and rego.LoadWasm) on mcp-warden's
// Wasm host, with data merged into wp's base data at the root. It makes
// the same decisions as NewRegoEngine on the same policy. An evaluation
// that runs past the timeout or the memory cap fails (and so denies) with
// wasm.ErrTimeout or wasm.ErrMemoryLimit. Close releases it.
func NewWasmEngine(ctx context.Context, wp *rego.WasmPolicy, data map[string]any, opts WasmOptions) (Engine, error) {
	if wp == nil {
		return nil, errors.New("wasm engine: nil policy")
	}
	doc, err := wp.DataJSON(data)
	if err != nil {
		return nil, fmt.Errorf("wasm engine: %w", err)
	}
	cacheDir := opts.CacheDir
	switch cacheDir {
	case "":
		cacheDir = DefaultWasmCacheDir()
	case "-":
		cacheDir = ""
	}
	module, err := wasm.Compile(ctx, wp.Module, wasm.CompileOptions{CacheDir: cacheDir})
	if err != nil {
		return nil, fmt.Errorf("wasm engine: %w", err)
	}
	pool, err := wasm.NewPool(ctx, module, wasm.PoolOptions{
		Entrypoint:       EntrypointPath,
		Data:             doc,
		Size:             opts.Instances,
		Timeout:          opts.Timeout,
		MemoryLimitPages: opts.MemoryLimitPages,
		// A prebuilt module, whose source is unknown, is volatile.
		RecordNondeterministic: wp.Volatile(),
	})
	if err != nil {
		_ = module.Close(ctx)
		return nil, fmt.Errorf("wasm engine: %w", err)
	}
	return &wasmEngine{module: module, pool: pool, revision: wp.Revision, reusable: !wp.Volatile(VolatileInputFields...),
		fields: newInputFields(wp.InputPaths())}, nil
}

// CompileWasm compiles p's decision entry point to WebAssembly for
// NewWasmEngine, refusing the builtins the Wasm host refuses
// (wasm.RefusedBuiltins: I/O) at compile time.
func CompileWasm(ctx context.Context, p *rego.Policy) (*rego.WasmPolicy, error) {
	return rego.CompileWasm(ctx, p, Entrypoint, wasm.RefusedBuiltins)
}

type wasmEngine struct {
	module   *wasm.Module
	pool     *wasm.Pool
	revision string
	reusable bool // as regoEngine.reusable; false for a prebuilt module
	fields   inputFields
}

func (e *wasmEngine) cacheable() bool { return e.reusable }

func (e *wasmEngine) inputFields() inputFields { return e.fields }

func (e *wasmEngine) concurrency() int { return e.pool.Size() }

// Evaluate reduces input to what the policy reads before it is copied
// into an instance: parsing JSON is most of what an evaluation of a small
// policy costs inside Wasm, and the filter skips what the policy never
// reads several times faster (see inputFields.filterJSON).
func (e *wasmEngine) Evaluate(ctx context.Context, input []byte) (any, error) {
	if e.fields != nil {
		buf := filterBuffers.Get().(*[]byte)
		defer filterBuffers.Put(buf)
		reduced, err := e.fields.filterJSON((*buf)[:0], input)
		if err != nil {
			return nil, err
		}
		*buf = reduced[:0]
		input = reduced
	}
	ev, err := e.evaluatePruned(ctx, input)
	return ev.value, err
}

// filterBuffers hold reduced inputs, which live until they are copied into
// an instance.
var filterBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (e *wasmEngine) evaluatePruned(ctx context.Context, input []byte) (evaluation, error) {
	out, nd, err := e.pool.EvalRecorded(ctx, input)
	if errors.Is(err, wasm.ErrUndefined) {
		return evaluation{}, ErrUndefined
	}
	if err != nil {
		return evaluation{}, err
	}
	// Numbers as json.Number, as the rego engine returns them.
	v, err := decodeJSON(out)
	if err != nil {
		return evaluation{}, fmt.Errorf("decode result: %w", err)
	}
	return evaluation{value: v, nondeterministic: nd}, nil
}

func (e *wasmEngine) Revision() string { return e.revision }

// Close releases the instances and the compiled code, after evaluations in
// progress.
func (e *wasmEngine) Close() error {
	ctx := context.Background()
	e.pool.Close(ctx)
	return e.module.Close(ctx)
}
