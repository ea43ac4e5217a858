// Package preempt rewrites a WebAssembly module so that the host can stop it
// from another goroutine: it adds a mutable i32 global, exported as
// InterruptExport, and makes every function entry and every loop header
// trap (unreachable) while that global is non-zero.
//
// It is the cheap form of preemption: a load and a branch per loop
// iteration and per call, in place of wazero's close-on-context-done, which
// leaves native code for Go at every loop header (see RATIONALE.md, "How
// the Wasm deadline is enforced"). Code that neither loops nor calls runs
// for a time bounded by its size, so these checks bound every evaluation.
package preempt

import (
	"errors"
	"fmt"

	"github.com/mcp-warden/mcp-warden/wasm/internal/wasmbin"
)

// InterruptExport is the name of the global Instrument adds. Setting it to
// a non-zero value makes the module trap at the next function entry or loop
// iteration; nothing resets it, so an interrupted instance is for discarding.
const InterruptExport = "mcp_warden_interrupt"

// Section ids (WebAssembly core spec §5.5).
const (
	sectionCustom    = 0
	sectionImport    = 2
	sectionGlobal    = 6
	sectionExport    = 7
	sectionCode      = 10
	sectionDataCount = 12
	sectionTag       = 13
)

// Instrument returns a copy of module with the interrupt global and its
// checks. It refuses, with an error and never a panic, a module it cannot
// decode: a malformed one, or one using instructions outside the core
// specification's 2.0 set plus tail calls (SIMD, threads, exceptions, GC),
// which OPA does not emit.
func Instrument(module []byte) ([]byte, error) {
	sections, err := splitSections(module)
	if err != nil {
		return nil, err
	}
	importedGlobals, definedGlobals := uint32(0), uint32(0)
	for _, s := range sections {
		switch s.id {
		case sectionImport:
			if importedGlobals, err = countImportedGlobals(s.payload); err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
		case sectionGlobal:
			r := reader{b: s.payload}
			if definedGlobals = r.u32(); r.err != nil {
				return nil, fmt.Errorf("global section: %w", r.err)
			}
		}
	}
	interrupt := importedGlobals + definedGlobals
	check := interruptCheck(interrupt)

	out := append(make([]byte, 0, len(module)+len(module)/16), module[:8]...)
	var sawGlobal, sawExport bool
	for _, s := range sections {
		// A module without a global or export section gets one, in its
		// place in the section order.
		if s.id != sectionCustom {
			if !sawGlobal && order(s.id) > order(sectionGlobal) {
				out = wasmbin.AppendSection(out, sectionGlobal, appendGlobal(wasmbin.AppendU32(nil, 1), nil))
				sawGlobal = true
			}
			if !sawExport && order(s.id) > order(sectionExport) {
				out = wasmbin.AppendSection(out, sectionExport, appendExport(wasmbin.AppendU32(nil, 1), nil, interrupt))
				sawExport = true
			}
		}
		payload := s.payload
		switch s.id {
		case sectionGlobal:
			sawGlobal = true
			r := reader{b: payload}
			n := r.u32()
			payload = appendGlobal(wasmbin.AppendU32(nil, n+1), payload[r.pos:])
		case sectionExport:
			sawExport = true
			if payload, err = addExport(payload, interrupt); err != nil {
				return nil, fmt.Errorf("export section: %w", err)
			}
		case sectionCode:
			if payload, err = instrumentCode(payload, check); err != nil {
				return nil, fmt.Errorf("code section: %w", err)
			}
		}
		out = wasmbin.AppendSection(out, s.id, payload)
	}
	if !sawGlobal {
		out = wasmbin.AppendSection(out, sectionGlobal, appendGlobal(wasmbin.AppendU32(nil, 1), nil))
	}
	if !sawExport {
		out = wasmbin.AppendSection(out, sectionExport, appendExport(wasmbin.AppendU32(nil, 1), nil, interrupt))
	}
	return out, nil
}

// interruptCheck is `global.get $interrupt; if; unreachable; end`.
func interruptCheck(global uint32) []byte {
	b := []byte{0x23}
	b = wasmbin.AppendU32(b, global)
	return append(b, 0x04, 0x40, 0x00, 0x0b)
}

// appendGlobal appends the existing entries of a global section (after its
// count) and the interrupt global: mutable i32, initially 0.
func appendGlobal(b, entries []byte) []byte {
	b = append(b, entries...)
	return append(b, 0x7f, 0x01, 0x41, 0x00, 0x0b)
}

// appendExport appends existing export entries and the interrupt global's.
func appendExport(b, entries []byte, global uint32) []byte {
	b = append(b, entries...)
	b = wasmbin.AppendName(b, InterruptExport)
	b = append(b, 0x03)
	return wasmbin.AppendU32(b, global)
}

// addExport adds the interrupt global to an export section, refusing a
// module that already exports the name.
func addExport(payload []byte, global uint32) ([]byte, error) {
	r := reader{b: payload}
	n := r.u32()
	entries := payload[r.pos:]
	for range n {
		name := r.name()
		r.byte() // kind
		r.u32()  // index
		if r.err != nil {
			return nil, r.err
		}
		if name == InterruptExport {
			return nil, fmt.Errorf("the module already exports %s", InterruptExport)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.pos != len(payload) {
		return nil, errors.New("trailing bytes")
	}
	return appendExport(wasmbin.AppendU32(nil, n+1), entries, global), nil
}

// countImportedGlobals counts the global imports of an import section.
func countImportedGlobals(payload []byte) (uint32, error) {
	r := reader{b: payload}
	n, globals := r.u32(), uint32(0)
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0x00: // function: type index
			r.u32()
		case 0x01: // table: reference type, limits
			r.byte()
			r.limits()
		case 0x02: // memory
			r.limits()
		case 0x03: // global: value type, mutability
			r.valType()
			r.byte()
			globals++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			r.fail("import kind 0x%02x", kind)
		}
	}
	if r.err == nil && r.pos != len(payload) {
		r.fail("trailing bytes")
	}
	return globals, r.err
}

// instrumentCode inserts check at the entry of every function body of a
// code section and after the block type of every loop instruction.
func instrumentCode(payload, check []byte) ([]byte, error) {
	r := reader{b: payload}
	n := r.u32()
	out := wasmbin.AppendU32(make([]byte, 0, len(payload)+len(payload)/16), n)
	var body []byte
	for i := range n {
		size := r.u32()
		code := r.bytes(size)
		if r.err != nil {
			return nil, fmt.Errorf("function %d: %w", i, r.err)
		}
		var err error
		if body, err = instrumentBody(body[:0], code, check); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = wasmbin.AppendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.err == nil && r.pos != len(payload) {
		r.fail("trailing bytes")
	}
	return out, r.err
}

// instrumentBody appends code, one function body (locals and expression),
// to out with check at its entry and at each loop header.
func instrumentBody(out, code, check []byte) ([]byte, error) {
	r := reader{b: code}
	groups := r.u32()
	for range groups {
		r.u32()
		r.valType()
	}
	if r.err != nil {
		return nil, fmt.Errorf("locals: %w", r.err)
	}
	out = append(out, code[:r.pos]...)
	out = append(out, check...)
	depth := 1 // the function's own block
	for depth > 0 {
		start := r.pos
		op := r.byte()
		if r.err != nil {
			return nil, fmt.Errorf("unterminated expression: %w", r.err)
		}
		switch op {
		case 0x02, 0x03, 0x04: // block, loop, if
			r.blockType()
			depth++
		case 0x0b: // end
			depth--
		default:
			r.immediates(op)
		}
		if r.err != nil {
			return nil, fmt.Errorf("instruction 0x%02x at offset %d: %w", op, start, r.err)
		}
		out = append(out, code[start:r.pos]...)
		if op == 0x03 {
			out = append(out, check...)
		}
	}
	if r.pos != len(code) {
		return nil, fmt.Errorf("%d bytes after the end of the expression", len(code)-r.pos)
	}
	return out, nil
}

// section is one section of a module, its payload a view of the module.
type section struct {
	id      byte
	payload []byte
}

func splitSections(module []byte) ([]section, error) {
	if len(module) < 8 || string(module[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly module: no \\0asm magic")
	}
	if string(module[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("unsupported WebAssembly binary version % x", module[4:8])
	}
	r := reader{b: module, pos: 8}
	var sections []section
	for r.pos < len(module) {
		id := r.byte()
		payload := r.bytes(r.u32())
		if r.err != nil {
			return nil, fmt.Errorf("section %d: %w", id, r.err)
		}
		sections = append(sections, section{id: id, payload: payload})
	}
	return sections, nil
}

// order is the position of a known section id in the order the binary
// format requires (custom sections may appear anywhere).
func order(id byte) int {
	switch id {
	case sectionTag:
		return 55 // between memory (5) and global (6)
	case sectionDataCount:
		return 95 // between element (9) and code (10)
	}
	return int(id) * 10
}
