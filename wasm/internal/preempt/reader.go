package preempt

import (
	"errors"
	"fmt"
)

// reader decodes the binary format. The first error sticks: later reads
// return zero values, so a caller checks err once after a group of reads.
type reader struct {
	b   []byte
	pos int
	err error
}

var errTruncated = errors.New("unexpected end")

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) bytes(n uint32) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)-r.pos) {
		r.err = errTruncated
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

// leb reads an LEB128 number of at most maxBytes bytes and returns its
// low 64 bits (enough for the values this package reads: counts, indices).
func (r *reader) leb(maxBytes int) uint64 {
	var v uint64
	for i := range maxBytes {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if i < 10 {
			v |= uint64(c&0x7f) << (7 * i)
		}
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("LEB128 number longer than %d bytes", maxBytes)
	return 0
}

func (r *reader) u32() uint32 {
	v := r.leb(5)
	if v > 0xffffffff {
		r.fail("u32 out of range")
	}
	return uint32(v)
}

func (r *reader) u64() uint64 { return r.leb(10) }

func (r *reader) name() string { return string(r.bytes(r.u32())) }

// Value types of the core specification 2.0: numbers, v128, references.
func isValType(c byte) bool {
	switch c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

func (r *reader) valType() {
	if c := r.byte(); r.err == nil && !isValType(c) {
		r.fail("unsupported value type 0x%02x", c)
	}
}

// limits reads a table or memory type's limits (shared and 64-bit flags
// included).
func (r *reader) limits() {
	flags := r.byte()
	if flags > 0x07 {
		r.fail("limits flags 0x%02x", flags)
	}
	r.u64()
	if flags&0x01 != 0 {
		r.u64()
	}
}

// blockType reads the type of block, loop and if: empty, one value type,
// or a (non-negative, 33-bit signed) type index.
func (r *reader) blockType() {
	if r.err != nil {
		return
	}
	if r.pos < len(r.b) {
		if c := r.b[r.pos]; c == 0x40 || isValType(c) {
			r.pos++
			return
		}
	}
	// A type index: s33, non-negative, so bit 6 of the last byte is clear.
	start := r.pos
	r.leb(5)
	if r.err == nil && r.b[r.pos-1]&0x40 != 0 {
		r.fail("unsupported block type at offset %d", start)
	}
}

// memArg reads a load or store's alignment (with the multi-memory flag)
// and offset.
func (r *reader) memArg() {
	if align := r.u32(); align&0x40 != 0 {
		r.u32() // memory index
	}
	r.u64()
}

// immediates skips the immediates of op, an instruction other than block,
// loop, if and end, failing on an instruction this package does not know.
func (r *reader) immediates(op byte) {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0f, op == 0x1a, op == 0x1b, op == 0xd1:
		// unreachable, nop, else, return, drop, select, ref.is_null
	case op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op == 0xd2,
		op >= 0x20 && op <= 0x26:
		// br, br_if, call, return_call, ref.func, local.*, global.*, table.get/set
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select with types
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valType()
		}
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memArg()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41: // i32.const
		r.leb(5)
	case op == 0x42: // i64.const
		r.leb(10)
	case op == 0x43: // f32.const
		r.bytes(4)
	case op == 0x44: // f64.const
		r.bytes(8)
	case op >= 0x45 && op <= 0xc4:
		// numeric instructions, sign extension included
	case op == 0xd0: // ref.null
		r.valType()
	case op == 0xfc:
		r.prefixed()
	default:
		r.fail("unsupported instruction 0x%02x", op)
	}
}

// prefixed skips an 0xfc instruction: saturating truncation, bulk memory
// and table operations.
func (r *reader) prefixed() {
	switch sub := r.u32(); {
	case sub <= 7: // trunc_sat
	case sub == 8, sub == 10, sub == 12, sub == 14:
		// memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	case sub == 9, sub == 11, sub == 13, sub == 15, sub == 16, sub == 17:
		// data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.u32()
	default:
		r.fail("unsupported instruction 0xfc %d", sub)
	}
}
