package host

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"

	"github.com/mcp-warden/mcp-warden/wasm/internal/preempt"
)

// Module is a policy.wasm compiled to machine code once, from which any
// number of Instances are made. It is safe for concurrent use.
type Module struct {
	rt       *runtime
	compiled wazero.CompiledModule
}

// requiredExports are the functions of ABI 1.2 and later the host calls.
var requiredExports = []string{
	"opa_eval", "opa_malloc", "opa_free", "opa_json_parse", "opa_json_dump",
	"opa_value_parse", "opa_value_dump", "opa_heap_ptr_get",
	"builtins", "entrypoints",
}

// Compile compiles a policy.wasm, made interruptible (preempt.Instrument),
// or finds it in cacheDir's compilation cache ("" for memory only). It checks the module's shape (imports and
// exports of OPA's ABI); the ABI version is checked when an instance is made.
func Compile(ctx context.Context, wasmBytes []byte, cacheDir string) (*Module, error) {
	rt, err := sharedRuntime(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	// Every function entry and loop header tests the interrupt global the
	// evaluation deadline sets (see watchdog.go).
	instrumented, err := preempt.Instrument(wasmBytes)
	if err != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	compiled, err := compileModule(ctx, rt.rt, instrumented)
	if err != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	exports := compiled.ExportedFunctions()
	for _, name := range requiredExports {
		if _, ok := exports[name]; !ok {
			_ = compiled.Close(ctx)
			return nil, fmt.Errorf("not an OPA policy module of ABI 1.2 or later: it does not export %s", name)
		}
	}
	for _, imp := range compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if mod != "env" || !isHostImport(name) {
			_ = compiled.Close(ctx)
			return nil, fmt.Errorf("not an OPA policy module: it imports %s.%s, which the OPA ABI does not provide", mod, name)
		}
	}
	for _, mem := range compiled.ImportedMemories() {
		if mod, name, _ := mem.Import(); mod != "env" || name != "memory" {
			return nil, fmt.Errorf("not an OPA policy module: it imports memory %s.%s", mod, name)
		}
	}
	return &Module{rt: rt, compiled: compiled}, nil
}

// compileModule is rt.CompileModule, with a panic of wazero's validator on
// a malformed module (v1.12 panics on a function type index out of range)
// made an error.
func compileModule(ctx context.Context, rt wazero.Runtime, module []byte) (_ wazero.CompiledModule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return rt.CompileModule(ctx, module)
}

func isHostImport(name string) bool {
	for _, f := range hostImports {
		if f.name == name {
			return true
		}
	}
	return false
}

// Close releases the compiled code. Instances already made keep working
// until closed.
func (m *Module) Close(ctx context.Context) error { return m.compiled.Close(ctx) }

// minMemoryPages is the minimum memory OPA's policies declare.
func (m *Module) minMemoryPages() uint32 {
	for _, mem := range m.compiled.ImportedMemories() {
		return mem.Min()
	}
	return 2
}
