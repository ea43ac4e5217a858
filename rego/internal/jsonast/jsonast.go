// Package jsonast decodes a JSON document straight into an OPA AST value.
//
// It gives the value that ast.InterfaceToValue gives for the document as
// decoded by encoding/json with UseNumber (OPA's util.UnmarshalJSON), and
// fails where that fails, without building the map[string]any in between:
// the input of every decision goes through here, so the intermediate
// document was most of the allocations of an evaluation.
package jsonast

import (
	"fmt"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// SyntaxError is a malformed document.
type SyntaxError struct {
	Offset int // byte offset of the error in the document
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.msg)
}

// Parse decodes data, which must hold exactly one JSON value (RFC 8259),
// surrounding white space aside. Duplicate object keys keep the last value,
// and invalid UTF-8 and unpaired surrogate escapes become U+FFFD, as with
// encoding/json.
func Parse(data []byte) (ast.Value, error) {
	d := decoders.Get().(*decoder)
	defer d.release()
	d.data, d.pos = data, 0
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos < len(d.data) {
		return nil, d.errorf("unexpected %s after the document", d.describe())
	}
	return v, nil
}

// decoders keeps decoders with their scratch space for reuse.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

type decoder struct {
	data []byte
	pos  int
	// Scratch space, reused from one document to the next: the elements of
	// the arrays and objects being decoded (a stack: nested ones on top),
	// and the bytes of a string with escapes.
	values []ast.Value
	keys   []string
	buf    []byte
}

// release returns d to the pool, dropping its references to the document.
func (d *decoder) release() {
	clear(d.values[:cap(d.values)])
	clear(d.keys[:cap(d.keys)])
	d.data, d.values, d.keys = nil, d.values[:0], d.keys[:0]
	decoders.Put(d)
}

func (d *decoder) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: d.pos, msg: fmt.Sprintf(format, args...)}
}

// describe names the byte at pos for an error message.
func (d *decoder) describe() string {
	if d.pos >= len(d.data) {
		return "end of input"
	}
	return fmt.Sprintf("character %q", d.data[d.pos])
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (ast.Value, error) {
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of input, want a value")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return ast.String(s), nil
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case c == 't':
		return ast.Boolean(true), d.literal("true")
	case c == 'f':
		return ast.Boolean(false), d.literal("false")
	case c == 'n':
		return ast.NullValue, d.literal("null")
	default:
		return nil, d.errorf("unexpected %s, want a value", d.describe())
	}
}

func (d *decoder) literal(word string) error {
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return d.errorf("invalid literal, want %s", word)
	}
	d.pos += len(word)
	return nil
}

func (d *decoder) array(depth int) (ast.Value, error) {
	if depth > maxDepth {
		return nil, d.errorf("nested too deeply")
	}
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return ast.NewArray(), nil
	}
	mark := len(d.values)
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.values = append(d.values, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of input in an array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.skipSpace()
		case ']':
			d.pos++
			values := d.values[mark:]
			// One block for all the terms, as ast.InterfaceToValue does.
			terms := make([]ast.Term, len(values))
			elems := make([]*ast.Term, len(values))
			for i, v := range values {
				terms[i].Value = v
				elems[i] = &terms[i]
			}
			d.values = d.values[:mark]
			return ast.NewArray(elems...), nil
		default:
			return nil, d.errorf("unexpected %s in an array, want , or ]", d.describe())
		}
	}
}

func (d *decoder) object(depth int) (ast.Value, error) {
	if depth > maxDepth {
		return nil, d.errorf("nested too deeply")
	}
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return ast.NewObject(), nil
	}
	// This object's keys and values are on the stacks above these marks.
	kmark, vmark := len(d.keys), len(d.values)
	for {
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.errorf("unexpected %s in an object, want a string key", d.describe())
		}
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.errorf("unexpected %s after an object key, want :", d.describe())
		}
		d.pos++
		d.skipSpace()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.setKey(kmark, vmark, k, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of input in an object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.skipSpace()
		case '}':
			d.pos++
			keys, values := d.keys[kmark:], d.values[vmark:]
			terms := make([]ast.Term, 2*len(keys))
			kvs := make([][2]*ast.Term, len(keys))
			for i, k := range keys {
				terms[2*i].Value = ast.String(k)
				terms[2*i+1].Value = values[i]
				kvs[i] = [2]*ast.Term{&terms[2*i], &terms[2*i+1]}
			}
			d.keys, d.values = d.keys[:kmark], d.values[:vmark]
			return ast.NewObject(kvs...), nil
		default:
			return nil, d.errorf("unexpected %s in an object, want , or }", d.describe())
		}
	}
}

// setKey sets key k of the object whose entries start at kmark and vmark
// on the stacks to v: a later duplicate replaces the earlier value, as
// decoding into a map does (ast.NewObject must not see duplicates).
func (d *decoder) setKey(kmark, vmark int, k string, v ast.Value) {
	for i := kmark; i < len(d.keys); i++ {
		if d.keys[i] == k {
			d.values[vmark+i-kmark] = v
			return
		}
	}
	d.keys = append(d.keys, k)
	d.values = append(d.values, v)
}

func (d *decoder) number() (ast.Value, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos < len(d.data) && d.data[d.pos] == '0':
		d.pos++
	case d.pos < len(d.data) && d.data[d.pos] >= '1' && d.data[d.pos] <= '9':
		d.digits()
	default:
		return nil, d.errorf("invalid number, want a digit")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if d.digits() == 0 {
			return nil, d.errorf("invalid number, want a digit after the decimal point")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if d.digits() == 0 {
			return nil, d.errorf("invalid number, want a digit in the exponent")
		}
	}
	text := string(d.data[start:d.pos])
	if t := ast.InternedIntNumberTermFromString(text); t != nil {
		return t.Value, nil
	}
	n, err := ast.NumberChecked(text)
	if err != nil {
		return nil, &SyntaxError{Offset: start, msg: err.Error()}
	}
	return n, nil
}

func (d *decoder) digits() int {
	start := d.pos
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
	}
	return d.pos - start
}

// string decodes the string starting at the opening quote at pos.
func (d *decoder) string() (string, error) {
	d.pos++ // "
	start := d.pos
	// Fast path: printable ASCII without escapes is the string as is.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := string(d.data[start:d.pos])
			d.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		d.pos++
	}
	d.buf = append(d.buf[:0], d.data[start:d.pos]...)
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return string(d.buf), nil
		case c < 0x20:
			return "", d.errorf("control character %q in a string", c)
		case c == '\\':
			if err := d.escape(); err != nil {
				return "", err
			}
		case c < utf8.RuneSelf:
			d.buf = append(d.buf, c)
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			d.buf = utf8.AppendRune(d.buf, r) // utf8.RuneError for an invalid byte
			d.pos += size
		}
	}
	return "", d.errorf("unexpected end of input in a string")
}

// escape decodes the escape sequence at pos into buf.
func (d *decoder) escape() error {
	if d.pos+1 >= len(d.data) {
		d.pos = len(d.data)
		return d.errorf("unexpected end of input in a string")
	}
	c := d.data[d.pos+1]
	d.pos += 2
	switch c {
	case '"', '\\', '/':
		d.buf = append(d.buf, c)
	case 'b':
		d.buf = append(d.buf, '\b')
	case 'f':
		d.buf = append(d.buf, '\f')
	case 'n':
		d.buf = append(d.buf, '\n')
	case 'r':
		d.buf = append(d.buf, '\r')
	case 't':
		d.buf = append(d.buf, '\t')
	case 'u':
		r := d.hex4(d.pos)
		if r < 0 {
			return d.errorf("invalid \\u escape in a string")
		}
		d.pos += 4
		if utf16.IsSurrogate(r) {
			// A pair makes one rune; anything else is U+FFFD, and whatever
			// followed is decoded on its own.
			r2 := rune(-1)
			if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
				r2 = d.hex4(d.pos + 2)
			}
			if pair := utf16.DecodeRune(r, r2); pair != unicode.ReplacementChar {
				d.pos += 6
				r = pair
			} else {
				r = unicode.ReplacementChar
			}
		}
		d.buf = utf8.AppendRune(d.buf, r)
	default:
		d.pos -= 1
		return d.errorf("invalid escape %q in a string", "\\"+string(c))
	}
	return nil
}

// hex4 returns the value of the four hex digits at i, or -1.
func (d *decoder) hex4(i int) rune {
	if i+4 > len(d.data) {
		return -1
	}
	var r rune
	for _, c := range d.data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
