package host

// This file builds the "env" glue module an OPA policy imports from.
//
// policy.wasm imports its linear memory and its host functions from one
// module named "env". wazero's HostModuleBuilder exports functions only,
// never a memory, so the Go functions live in the host module "opa" and this
// small module defines the memory (with the instance's page cap), imports
// the functions from "opa" and re-exports both under the names the policy
// expects. It is a dozen hand-encoded bytes per entry: OPA's own encoder is
// internal to its module.

import "github.com/mcp-warden/mcp-warden/wasm/internal/wasmbin"

// hostModuleName is the module holding the Go host functions.
const hostModuleName = "opa"

// hostImports are the host functions in glue import order (= function index)
// with the index of their type in glueTypes.
var hostImports = []struct {
	name    string
	typeIdx byte
}{
	{"opa_builtin0", 1},
	{"opa_builtin1", 2},
	{"opa_builtin2", 3},
	{"opa_builtin3", 4},
	{"opa_builtin4", 5},
	{"opa_abort", 0},
	{"opa_println", 0},
}

const (
	wasmI32       = 0x7f
	wasmFuncType  = 0x60
	kindFunc      = 0x00
	kindMemory    = 0x02
	sectionType   = 1
	sectionImport = 2
	sectionMemory = 5
	sectionExport = 7
)

// glueModule returns the binary of the glue module with a memory of at least
// minPages and at most maxPages (0: no maximum) pages.
func glueModule(minPages, maxPages uint32) []byte {
	// Types: 0 = (i32) -> (); n = (i32 × (n+1)) -> i32 for n = 1..5.
	var types []byte
	types = wasmbin.AppendU32(types, 6)
	types = append(types, wasmFuncType, 1, wasmI32, 0)
	for params := 2; params <= 6; params++ {
		types = append(types, wasmFuncType, byte(params))
		for range params {
			types = append(types, wasmI32)
		}
		types = append(types, 1, wasmI32)
	}

	var imports []byte
	imports = wasmbin.AppendU32(imports, uint32(len(hostImports)))
	for _, f := range hostImports {
		imports = wasmbin.AppendName(imports, hostModuleName)
		imports = wasmbin.AppendName(imports, f.name)
		imports = append(imports, kindFunc, f.typeIdx)
	}

	var memory []byte
	memory = wasmbin.AppendU32(memory, 1)
	if maxPages > 0 {
		memory = append(memory, 0x01)
		memory = wasmbin.AppendU32(memory, minPages)
		memory = wasmbin.AppendU32(memory, maxPages)
	} else {
		memory = append(memory, 0x00)
		memory = wasmbin.AppendU32(memory, minPages)
	}

	var exports []byte
	exports = wasmbin.AppendU32(exports, uint32(1+len(hostImports)))
	exports = wasmbin.AppendName(exports, "memory")
	exports = append(exports, kindMemory, 0)
	for i, f := range hostImports {
		exports = wasmbin.AppendName(exports, f.name)
		exports = append(exports, kindFunc)
		exports = wasmbin.AppendU32(exports, uint32(i))
	}

	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	m = wasmbin.AppendSection(m, sectionType, types)
	m = wasmbin.AppendSection(m, sectionImport, imports)
	m = wasmbin.AppendSection(m, sectionMemory, memory)
	m = wasmbin.AppendSection(m, sectionExport, exports)
	return m
}
