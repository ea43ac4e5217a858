package auditlog

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The canonical encoding a record's hash is computed over is JSON with:
// object members sorted by the UTF-8 bytes of their unescaped keys, no
// insignificant whitespace, strings escaped minimally (\" \\ \b \f \n \r \t,
// other control characters as \u00XX, everything else as UTF-8), and numbers
// exactly as written. Duplicate keys and invalid UTF-8 are errors, so one
// text has at most one meaning. A reader that re-serializes a record
// without changing its values and number spellings keeps its hash valid.

// maxDepth bounds nesting, so a hostile line cannot exhaust the stack.
const maxDepth = 1000

// Record field names of the hash chain.
const (
	keyHash     = "hash"
	keyPrevHash = "prev_hash"
)

// SyntaxError is a line that is not a JSON object in the accepted grammar.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("offset %d: %s", e.Offset, e.Msg) }

// record is what canonicalRecord learns about a record's top level.
type record struct {
	// canonical is the canonical encoding of the object without "hash".
	canonical []byte
	// hash and prevHash are the values of those top-level members ("" when
	// absent or not strings).
	hash, prevHash string
	// prevAt is the offset in canonical of prev_hash's value (after the
	// opening quote), or -1.
	prevAt int
}

// canonicalRecord canonicalizes the JSON object src, leaving out its
// top-level "hash" member, appending to dst.
func canonicalRecord(dst, src []byte) (record, error) {
	c := canonicalizer{src: src, out: dst}
	c.skipSpace()
	if c.pos >= len(src) || src[c.pos] != '{' {
		return record{}, c.fail("a record is a JSON object")
	}
	r := record{prevAt: -1}
	if err := c.object(0, &r); err != nil {
		return record{}, err
	}
	c.skipSpace()
	if c.pos != len(src) {
		return record{}, c.fail("content after the object")
	}
	r.canonical = c.out
	return r, nil
}

type canonicalizer struct {
	src     []byte
	pos     int
	out     []byte
	scratch []byte
	// members is a stack shared by nested objects, so that one record
	// costs a few allocations however many objects it holds.
	members []member
}

func (c *canonicalizer) fail(msg string) error { return &SyntaxError{Offset: c.pos, Msg: msg} }

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) error {
	if depth > maxDepth {
		return c.fail("nested too deeply")
	}
	c.skipSpace()
	if c.pos >= len(c.src) {
		return c.fail("unexpected end")
	}
	switch b := c.src[c.pos]; {
	case b == '{':
		return c.object(depth, nil)
	case b == '[':
		return c.array(depth)
	case b == '"':
		s, err := c.string()
		if err != nil {
			return err
		}
		c.out = appendString(c.out, s)
		return nil
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || b >= '0' && b <= '9':
		return c.number()
	}
	return c.fail("unexpected character")
}

func (c *canonicalizer) literal(lit string) error {
	if !bytes.HasPrefix(c.src[c.pos:], []byte(lit)) {
		return c.fail("invalid literal")
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

// number copies a JSON number verbatim after checking its grammar.
func (c *canonicalizer) number() error {
	start := c.pos
	p := c.pos
	digits := func() int {
		n := 0
		for p < len(c.src) && c.src[p] >= '0' && c.src[p] <= '9' {
			p++
			n++
		}
		return n
	}
	if c.src[p] == '-' {
		p++
	}
	if p < len(c.src) && c.src[p] == '0' {
		p++
	} else if digits() == 0 {
		c.pos = p
		return c.fail("invalid number")
	}
	if p < len(c.src) && c.src[p] == '.' {
		p++
		if digits() == 0 {
			c.pos = p
			return c.fail("invalid number")
		}
	}
	if p < len(c.src) && (c.src[p] == 'e' || c.src[p] == 'E') {
		p++
		if p < len(c.src) && (c.src[p] == '+' || c.src[p] == '-') {
			p++
		}
		if digits() == 0 {
			c.pos = p
			return c.fail("invalid number")
		}
	}
	c.out = append(c.out, c.src[start:p]...)
	c.pos = p
	return nil
}

func (c *canonicalizer) array(depth int) error {
	c.pos++ // [
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.src) && c.src[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.src) {
			return c.fail("unexpected end in array")
		}
		switch c.src[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return c.fail("expected , or ] in array")
		}
	}
}

type member struct {
	key        []byte // unescaped
	start, end int    // canonical "key":value in c.out
	valueAt    int    // start of the value in c.out
}

// object canonicalizes an object. At the top level (top != nil) it leaves
// out "hash" and reports hash and prev_hash.
func (c *canonicalizer) object(depth int, top *record) error {
	c.pos++ // {
	base := len(c.out)
	c.out = append(c.out, '{')
	first := len(c.members)
	defer func() { c.members = c.members[:first] }()
	c.skipSpace()
	if c.pos < len(c.src) && c.src[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	for {
		c.skipSpace()
		if c.pos >= len(c.src) || c.src[c.pos] != '"' {
			return c.fail("expected a string key")
		}
		key, err := c.string()
		if err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.src) || c.src[c.pos] != ':' {
			return c.fail("expected : after key")
		}
		c.pos++
		beforeComma := len(c.out)
		if len(c.members) > first {
			c.out = append(c.out, ',')
		}
		m := member{key: key, start: len(c.out)}
		c.out = appendString(c.out, key)
		c.out = append(c.out, ':')
		m.valueAt = len(c.out)
		if err := c.value(depth + 1); err != nil {
			return err
		}
		m.end = len(c.out)
		if top != nil && (string(m.key) == keyHash || string(m.key) == keyPrevHash) {
			var s string
			if v := c.out[m.valueAt:m.end]; len(v) >= 2 && v[0] == '"' {
				s, _ = strconv.Unquote(string(v))
			}
			if string(m.key) == keyHash {
				top.hash = s
				c.out = c.out[:beforeComma] // left out of the canonical form
				m.end = -1
			} else {
				top.prevHash = s
			}
		}
		if m.end >= 0 {
			c.members = append(c.members, m)
		}
		c.skipSpace()
		if c.pos >= len(c.src) {
			return c.fail("unexpected end in object")
		}
		if c.src[c.pos] == '}' {
			c.pos++
			break
		}
		if c.src[c.pos] != ',' {
			return c.fail("expected , or } in object")
		}
		c.pos++
	}
	members := c.members[first:]
	cmpKeys := func(a, b member) int { return bytes.Compare(a.key, b.key) }
	sorted := slices.IsSortedFunc(members, cmpKeys)
	if !sorted {
		slices.SortStableFunc(members, cmpKeys)
	}
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i].key, members[i-1].key) {
			return c.fail(fmt.Sprintf("duplicate key %q", members[i].key))
		}
	}
	if sorted { // already in canonical order, as written
		for _, m := range members {
			if top != nil && string(m.key) == keyPrevHash && c.out[m.valueAt] == '"' {
				top.prevAt = m.valueAt + 1
			}
		}
		c.out = append(c.out, '}')
		return nil
	}
	// Rewrite the members in order, separated by commas.
	c.scratch = c.scratch[:0]
	for i, m := range members {
		if i > 0 {
			c.scratch = append(c.scratch, ',')
		}
		if top != nil && string(m.key) == keyPrevHash && c.out[m.valueAt] == '"' {
			top.prevAt = base + 1 + len(c.scratch) + (m.valueAt - m.start) + 1
		}
		c.scratch = append(c.scratch, c.out[m.start:m.end]...)
	}
	c.out = append(append(c.out[:base+1], c.scratch...), '}')
	return nil
}

// string reads a JSON string at c.pos and returns its unescaped bytes
// (which alias c.src when it holds no escapes).
func (c *canonicalizer) string() ([]byte, error) {
	c.pos++ // opening quote
	start := c.pos
	for i := c.pos; i < len(c.src); i++ {
		switch b := c.src[i]; {
		case b == '"':
			s := c.src[start:i]
			if !utf8.Valid(s) {
				return nil, c.fail("invalid UTF-8 in string")
			}
			c.pos = i + 1
			return s, nil
		case b == '\\':
			return c.escapedString(start)
		case b < 0x20:
			c.pos = i
			return nil, c.fail("control character in string")
		}
	}
	return nil, c.fail("unterminated string")
}

func (c *canonicalizer) escapedString(start int) ([]byte, error) {
	var s []byte
	i := start
	for i < len(c.src) {
		b := c.src[i]
		switch {
		case b == '"':
			if !utf8.Valid(s) {
				return nil, c.fail("invalid UTF-8 in string")
			}
			c.pos = i + 1
			return s, nil
		case b < 0x20:
			c.pos = i
			return nil, c.fail("control character in string")
		case b != '\\':
			s = append(s, b)
			i++
			continue
		}
		if i+1 >= len(c.src) {
			break
		}
		switch e := c.src[i+1]; e {
		case '"', '\\', '/':
			s = append(s, e)
			i += 2
		case 'b':
			s, i = append(s, '\b'), i+2
		case 'f':
			s, i = append(s, '\f'), i+2
		case 'n':
			s, i = append(s, '\n'), i+2
		case 'r':
			s, i = append(s, '\r'), i+2
		case 't':
			s, i = append(s, '\t'), i+2
		case 'u':
			r, n, ok := c.unicodeEscape(i)
			if !ok {
				c.pos = i
				return nil, c.fail("invalid \\u escape")
			}
			s = utf8.AppendRune(s, r)
			i += n
		default:
			c.pos = i
			return nil, c.fail("invalid escape")
		}
	}
	return nil, c.fail("unterminated string")
}

// unicodeEscape reads \uXXXX (and a following low surrogate) at i.
func (c *canonicalizer) unicodeEscape(i int) (rune, int, bool) {
	hex4 := func(at int) (rune, bool) {
		if at+6 > len(c.src) || c.src[at] != '\\' || c.src[at+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(c.src[at+2:at+6]), 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex4(i)
	if !ok {
		return 0, 0, false
	}
	if r >= 0xD800 && r < 0xDC00 {
		lo, ok := hex4(i + 6)
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, 0, false // a lone surrogate has no UTF-8 form
		}
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12, true
	}
	if r >= 0xDC00 && r <= 0xDFFF {
		return 0, 0, false
	}
	return r, 6, true
}

// appendString appends s (valid UTF-8) as a canonical JSON string.
func appendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	last := 0
	for i := plainPrefix(s); i < len(s); i++ {
		b := s[i]
		if b >= 0x20 && b != '"' && b != '\\' {
			continue
		}
		dst = append(dst, s[last:i]...)
		last = i + 1
		switch b {
		case '"', '\\':
			dst = append(dst, '\\', b)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
		}
	}
	dst = append(dst, s[last:]...)
	return append(dst, '"')
}

// plainPrefix returns the length of s's longest prefix of printable ASCII
// other than '"' and '\\': bytes a canonical string holds as they are,
// whatever the rest of s holds. It looks at eight bytes at a time, since
// a record's strings (ids, times, names, reasons) are usually plain
// throughout.
func plainPrefix[S ~string | ~[]byte](s S) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		quote, backslash := w^('"'*ones), w^('\\'*ones)
		// A byte of w is at or above 0x80, below 0x20 (exact once none is
		// at or above 0x80), or equal to '"' or '\\' (a zero byte of quote
		// or backslash).
		if (w|(w-0x20*ones)&^w|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x80 || b == '"' || b == '\\' {
			break
		}
	}
	return i
}
