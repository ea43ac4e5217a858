// Package host drives OPA's WebAssembly ABI (1.2 and later) on wazero: one
// shared compiler runtime per compilation-cache directory, the host module
// with the builtin dispatchers, the glue module, and policy instances.
package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// MaxMemoryPages caps every memory of the shared runtimes below 4 GiB:
// api.Memory.Size is a uint32 and reads 0 for a full 65536-page memory.
const MaxMemoryPages = 65535

// runtime is a wazero runtime shared by every policy compiled with the same
// cache directory, with the "opa" host module instantiated once.
type runtime struct {
	rt wazero.Runtime

	mu    sync.Mutex
	glues map[[2]uint32]wazero.CompiledModule // (min, max) pages → glue
}

var (
	runtimesMu sync.Mutex
	runtimes   = map[string]*runtime{}
)

// sharedRuntime returns the runtime for cacheDir ("" keeps compiled code in
// memory only), creating it on first use. Runtimes live as long as the
// process: they hold only compiled code that policies share.
func sharedRuntime(ctx context.Context, cacheDir string) (*runtime, error) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if r, ok := runtimes[cacheDir]; ok {
		return r, nil
	}
	// The compiler (not the interpreter, 40× slower on policies), without
	// close-on-context-done: its checks at every loop header leave native
	// code for Go and cost more than the policy itself; the deadline is the
	// interrupt global of preempt.Instrument instead (see RATIONALE.md).
	cfg := wazero.NewRuntimeConfigCompiler().
		WithCloseOnContextDone(false).
		WithMemoryLimitPages(MaxMemoryPages)
	if cacheDir != "" {
		// The cache holds machine code the gateway will run: only the
		// gateway's user may write it.
		if err := checkCacheDir(cacheDir); err != nil {
			return nil, fmt.Errorf("wasm compilation cache: %w", err)
		}
		if err := os.MkdirAll(cacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("wasm compilation cache: %w", err)
		}
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm compilation cache %s: %w", cacheDir, err)
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := instantiateHostModule(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm host module: %w", err)
	}
	r := &runtime{rt: rt, glues: map[[2]uint32]wazero.CompiledModule{}}
	runtimes[cacheDir] = r
	return r, nil
}

// checkCacheDir refuses an existing cache directory, or a directory in it
// (wazero keeps one per version), that is not the process's user's own or
// that others may write: whoever can write it can run code in the process.
func checkCacheDir(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // made 0700
	}
	if err != nil {
		return err
	}
	if err := checkPrivateDir(dir, info); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		info, err := os.Stat(sub)
		if err != nil {
			return err
		}
		if err := checkPrivateDir(sub, info); err != nil {
			return err
		}
	}
	return nil
}

func checkPrivateDir(path string, info fs.FileInfo) error {
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this process's user (uid %d): whoever owns it can run code here; use a directory of your own", path, st.Uid, os.Geteuid())
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %#o): whoever can write it can run code here; chmod go-w it, or use another directory", path, perm)
	}
	return nil
}

// glue returns the compiled glue module for a memory of minPages..maxPages.
func (r *runtime) glue(ctx context.Context, minPages, maxPages uint32) (wazero.CompiledModule, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]uint32{minPages, maxPages}
	if g, ok := r.glues[key]; ok {
		return g, nil
	}
	g, err := r.rt.CompileModule(ctx, glueModule(minPages, maxPages))
	if err != nil {
		return nil, fmt.Errorf("wasm glue module: %w", err)
	}
	r.glues[key] = g
	return g, nil
}

// instantiateHostModule registers the Go functions every policy imports
// (through the glue). They are shared by all instances: each finds its
// instance in the context of the call.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := rt.NewHostModuleBuilder(hostModuleName)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(opaAbort), []api.ValueType{i32}, nil).
		Export("opa_abort")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(opaPrintln), []api.ValueType{i32}, nil).
		Export("opa_println")
	for arity := range 5 {
		params := make([]api.ValueType, 2+arity)
		for i := range params {
			params[i] = i32
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(builtinDispatcher(arity), params, []api.ValueType{i32}).
			Export(fmt.Sprintf("opa_builtin%d", arity))
	}
	_, err := b.Instantiate(ctx)
	return err
}

// errNoInstance is a bug: a host function called outside Instance.Eval.
var errNoInstance = errors.New("wasm host function called outside an evaluation")

type instanceKey struct{}

// instanceOf returns the instance evaluating in ctx.
func instanceOf(ctx context.Context) *Instance {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	if in == nil {
		panic(errNoInstance)
	}
	return in
}
