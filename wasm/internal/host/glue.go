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
	types = appendU32(types, 6)
	types = append(types, wasmFuncType, 1, wasmI32, 0)
	for params := 2; params <= 6; params++ {
		types = append(types, wasmFuncType, byte(params))
		for range params {
			types = append(types, wasmI32)
		}
		types = append(types, 1, wasmI32)
	}

	var imports []byte
	imports = appendU32(imports, uint32(len(hostImports)))
	for _, f := range hostImports {
		imports = appendName(imports, hostModuleName)
		imports = appendName(imports, f.name)
		imports = append(imports, kindFunc, f.typeIdx)
	}

	var memory []byte
	memory = appendU32(memory, 1)
	if maxPages > 0 {
		memory = append(memory, 0x01)
		memory = appendU32(memory, minPages)
		memory = appendU32(memory, maxPages)
	} else {
		memory = append(memory, 0x00)
		memory = appendU32(memory, minPages)
	}

	var exports []byte
	exports = appendU32(exports, uint32(1+len(hostImports)))
	exports = appendName(exports, "memory")
	exports = append(exports, kindMemory, 0)
	for i, f := range hostImports {
		exports = appendName(exports, f.name)
		exports = append(exports, kindFunc)
		exports = appendU32(exports, uint32(i))
	}

	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	m = appendSection(m, sectionType, types)
	m = appendSection(m, sectionImport, imports)
	m = appendSection(m, sectionMemory, memory)
	m = appendSection(m, sectionExport, exports)
	return m
}

func appendSection(b []byte, id byte, content []byte) []byte {
	b = append(b, id)
	b = appendU32(b, uint32(len(content)))
	return append(b, content...)
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

// appendU32 appends v in unsigned LEB128.
func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
