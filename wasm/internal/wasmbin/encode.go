// Package wasmbin writes the pieces of the WebAssembly binary format that
// the host's hand-made glue module and the preemption rewriter both need.
package wasmbin

// AppendSection appends a section: its id, payload size and payload.
func AppendSection(b []byte, id byte, payload []byte) []byte {
	b = append(b, id)
	b = AppendU32(b, uint32(len(payload)))
	return append(b, payload...)
}

// AppendName appends a name: its length and bytes.
func AppendName(b []byte, s string) []byte {
	b = AppendU32(b, uint32(len(s)))
	return append(b, s...)
}

// AppendU32 appends v in unsigned LEB128.
func AppendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
