package host

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
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

// Compile compiles a policy.wasm, or finds it in cacheDir's compilation
// cache ("" for memory only). It checks the module's shape (imports and
// exports of OPA's ABI); the ABI version is checked when an instance is made.
func Compile(ctx context.Context, wasmBytes []byte, cacheDir string) (*Module, error) {
	rt, err := sharedRuntime(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	compiled, err := rt.rt.CompileModule(ctx, wasmBytes)
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
