package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// filterJSON appends to dst the JSON document src reduced to fs: every
// member of an object that fs leaves out is dropped, everything else is
// copied byte for byte (duplicates, escapes and number spellings
// included), so a parser reading the result sees what it would see of
// those members in src. The nil inputFields copies the value whole.
//
// All of src is checked to be one JSON value, the parts dropped included:
// a document the engine would refuse whole is refused reduced.
func (fs inputFields) filterJSON(dst, src []byte) ([]byte, error) {
	f := jsonScanner{src: src, dst: dst}
	f.space()
	if err := f.filter(fs); err != nil {
		return nil, fmt.Errorf("input is not valid JSON: %w", err)
	}
	f.space()
	if f.i != len(src) {
		return nil, fmt.Errorf("input is not valid JSON: %w", f.unexpected())
	}
	return f.dst, nil
}

// jsonScanner reads the JSON document src from i, checking its syntax as
// it goes: filterJSON appends what it keeps to dst, decodeJSON builds
// values.
type jsonScanner struct {
	src   []byte
	i     int
	dst   []byte
	stack []byte // open containers of skip: '{' or '['
}

var errJSONEnd = errors.New("unexpected end of document")

func (f *jsonScanner) unexpected() error {
	if f.i >= len(f.src) {
		return errJSONEnd
	}
	return fmt.Errorf("unexpected %q at offset %d", f.src[f.i], f.i)
}

func (f *jsonScanner) space() {
	for f.i < len(f.src) {
		switch f.src[f.i] {
		case ' ', '\t', '\n', '\r':
			f.i++
		default:
			return
		}
	}
}

// afterElement moves past what follows an element of an object or array:
// a comma (closed is false: another element follows) or close.
func (f *jsonScanner) afterElement(close byte) (closed bool, err error) {
	f.space()
	if f.i >= len(f.src) {
		return false, errJSONEnd
	}
	switch f.src[f.i] {
	case ',':
		f.i++
		return false, nil
	case close:
		f.i++
		return true, nil
	}
	return false, f.unexpected()
}

// filter copies the value at i reduced to fs: an object member by member,
// anything else (or anything under a member read whole) as it is.
func (f *jsonScanner) filter(fs inputFields) error {
	if fs == nil || f.i >= len(f.src) || f.src[f.i] != '{' {
		start := f.i
		if err := f.skip(); err != nil {
			return err
		}
		f.dst = append(f.dst, f.src[start:f.i]...)
		return nil
	}
	f.i++
	f.dst = append(f.dst, '{')
	first := true
	f.space()
	if f.i < len(f.src) && f.src[f.i] == '}' {
		f.i++
		f.dst = append(f.dst, '}')
		return nil
	}
	for {
		f.space()
		keyAt := f.i
		if err := f.key(); err != nil {
			return err
		}
		key := f.src[keyAt:f.i]
		f.space()
		if f.i >= len(f.src) || f.src[f.i] != ':' {
			return f.unexpected()
		}
		f.i++
		f.space()
		sub, read, err := fs.member(key)
		if err != nil {
			return err
		}
		if read {
			if !first {
				f.dst = append(f.dst, ',')
			}
			first = false
			f.dst = append(append(f.dst, key...), ':')
			if err := f.filter(sub); err != nil {
				return err
			}
		} else if err := f.skip(); err != nil {
			return err
		}
		if closed, err := f.afterElement('}'); err != nil || closed {
			f.dst = append(f.dst, '}')
			return err
		}
	}
}

// member looks up the member whose quoted name is key.
func (fs inputFields) member(key []byte) (inputFields, bool, error) {
	name := key[1 : len(key)-1]
	for _, c := range name {
		if c == '\\' {
			var s string
			if err := json.Unmarshal(key, &s); err != nil {
				return nil, false, err
			}
			sub, read := fs[s]
			return sub, read, nil
		}
	}
	sub, read := fs[string(name)]
	return sub, read, nil
}

// skip moves i past one value, checking its syntax, without recursion:
// the containers it is in are on f.stack.
func (f *jsonScanner) skip() error {
	f.stack = f.stack[:0]
	for {
		// A value.
		f.space()
		if f.i >= len(f.src) {
			return errJSONEnd
		}
		switch c := f.src[f.i]; {
		case c == '{' || c == '[':
			f.i++
			f.space()
			if f.i < len(f.src) && (f.src[f.i] == '}' && c == '{' || f.src[f.i] == ']' && c == '[') {
				f.i++
				break
			}
			f.stack = append(f.stack, c)
			if c == '{' {
				if err := f.memberName(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if err := f.str(); err != nil {
				return err
			}
		case c == 't':
			if err := f.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := f.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := f.literal("null"); err != nil {
				return err
			}
		default:
			if err := f.number(); err != nil {
				return err
			}
		}
		// After a value: close containers, or go on to the next element.
		for {
			if len(f.stack) == 0 {
				return nil
			}
			f.space()
			if f.i >= len(f.src) {
				return errJSONEnd
			}
			open := f.stack[len(f.stack)-1]
			c := f.src[f.i]
			if c == ',' {
				f.i++
				if open == '{' {
					if err := f.memberName(); err != nil {
						return err
					}
				}
				break
			}
			if open == '{' && c == '}' || open == '[' && c == ']' {
				f.i++
				f.stack = f.stack[:len(f.stack)-1]
				continue
			}
			return f.unexpected()
		}
	}
}

// memberName moves past `"name" :` inside an object.
func (f *jsonScanner) memberName() error {
	f.space()
	if err := f.key(); err != nil {
		return err
	}
	f.space()
	if f.i >= len(f.src) || f.src[f.i] != ':' {
		return f.unexpected()
	}
	f.i++
	return nil
}

func (f *jsonScanner) key() error {
	if f.i >= len(f.src) || f.src[f.i] != '"' {
		return f.unexpected()
	}
	return f.str()
}

// plainInString marks the bytes a string may hold as they are: all but
// the quote, the backslash and control characters.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str moves past the string starting at i.
func (f *jsonScanner) str() error {
	f.i++ // the opening quote
	for f.i < len(f.src) {
		for f.i < len(f.src) && plainInString[f.src[f.i]] {
			f.i++
		}
		if f.i >= len(f.src) {
			break
		}
		c := f.src[f.i]
		switch {
		case c == '"':
			f.i++
			return nil
		case c == '\\':
			if f.i+1 >= len(f.src) {
				return errJSONEnd
			}
			switch f.src[f.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				f.i += 2
			case 'u':
				if f.i+6 > len(f.src) {
					return errJSONEnd
				}
				for _, h := range f.src[f.i+2 : f.i+6] {
					if !isHex(h) {
						return fmt.Errorf("invalid escape at offset %d", f.i)
					}
				}
				f.i += 6
			default:
				return fmt.Errorf("invalid escape at offset %d", f.i)
			}
		case c < 0x20:
			return f.unexpected()
		default:
			f.i++
		}
	}
	return errJSONEnd
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func (f *jsonScanner) literal(word string) error {
	if len(f.src)-f.i < len(word) || string(f.src[f.i:f.i+len(word)]) != word {
		return f.unexpected()
	}
	f.i += len(word)
	return nil
}

// number moves past -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (f *jsonScanner) number() error {
	start := f.i
	if f.i < len(f.src) && f.src[f.i] == '-' {
		f.i++
	}
	switch {
	case f.i < len(f.src) && f.src[f.i] == '0':
		f.i++
	case f.i < len(f.src) && '1' <= f.src[f.i] && f.src[f.i] <= '9':
		f.digits()
	default:
		return f.unexpected()
	}
	if f.i < len(f.src) && f.src[f.i] == '.' {
		f.i++
		if !f.digits() {
			return f.unexpected()
		}
	}
	if f.i < len(f.src) && (f.src[f.i] == 'e' || f.src[f.i] == 'E') {
		f.i++
		if f.i < len(f.src) && (f.src[f.i] == '+' || f.src[f.i] == '-') {
			f.i++
		}
		if !f.digits() {
			return f.unexpected()
		}
	}
	if f.i == start {
		return f.unexpected()
	}
	return nil
}

// digits moves past [0-9]* and reports whether there was one.
func (f *jsonScanner) digits() bool {
	start := f.i
	for f.i < len(f.src) && '0' <= f.src[f.i] && f.src[f.i] <= '9' {
		f.i++
	}
	return f.i > start
}

// decodeJSON decodes the JSON document src as encoding/json decodes it
// into an any with UseNumber: objects as map[string]any, arrays as []any,
// numbers as json.Number. An engine's result is small and decoded on every
// evaluation, where the reflection of encoding/json costs as much as the
// evaluation of a small policy.
func decodeJSON(src []byte) (any, error) {
	s := jsonScanner{src: src}
	s.space()
	v, err := s.value(0)
	if err == nil {
		s.space()
		if s.i != len(src) {
			err = s.unexpected()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return v, nil
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// value decodes the value at i, inside depth containers.
func (f *jsonScanner) value(depth int) (any, error) {
	if f.i >= len(f.src) {
		return nil, errJSONEnd
	}
	if c := f.src[f.i]; (c == '{' || c == '[') && depth >= maxJSONDepth {
		return nil, errors.New("exceeded max depth")
	}
	switch c := f.src[f.i]; {
	case c == '{':
		f.i++
		obj := map[string]any{}
		f.space()
		if f.i < len(f.src) && f.src[f.i] == '}' {
			f.i++
			return obj, nil
		}
		for {
			f.space()
			key, err := f.stringValue()
			if err != nil {
				return nil, err
			}
			f.space()
			if f.i >= len(f.src) || f.src[f.i] != ':' {
				return nil, f.unexpected()
			}
			f.i++
			f.space()
			v, err := f.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj[key] = v
			if closed, err := f.afterElement('}'); err != nil || closed {
				return obj, err
			}
		}
	case c == '[':
		f.i++
		arr := []any{}
		f.space()
		if f.i < len(f.src) && f.src[f.i] == ']' {
			f.i++
			return arr, nil
		}
		for {
			f.space()
			v, err := f.value(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
			if closed, err := f.afterElement(']'); err != nil || closed {
				return arr, err
			}
		}
	case c == '"':
		return f.stringValue()
	case c == 't':
		return true, f.literal("true")
	case c == 'f':
		return false, f.literal("false")
	case c == 'n':
		return nil, f.literal("null")
	default:
		start := f.i
		if err := f.number(); err != nil {
			return nil, err
		}
		return json.Number(f.src[start:f.i]), nil
	}
}

// stringValue decodes the string at i. Escapes other than \u are
// unescaped here (the quotes around names in reasons); a string with \u
// escapes or bytes that are not UTF-8 is left to encoding/json, which
// decodes surrogates and replaces what is not UTF-8 as it does.
func (f *jsonScanner) stringValue() (string, error) {
	start := f.i
	if err := f.key(); err != nil {
		return "", err
	}
	raw := f.src[start+1 : f.i-1]
	if !utf8.Valid(raw) {
		return f.unmarshalString(start)
	}
	esc := bytes.IndexByte(raw, '\\')
	if esc < 0 {
		switch string(raw) { // the members of every decision, without a copy
		case "allow":
			return "allow", nil
		case "reason":
			return "reason", nil
		case "hidden":
			return "hidden", nil
		}
		return string(raw), nil
	}
	out := make([]byte, 0, len(raw))
	for esc >= 0 {
		out = append(out, raw[:esc]...)
		var c byte
		switch raw[esc+1] {
		case '"', '\\', '/':
			c = raw[esc+1]
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // u
			return f.unmarshalString(start)
		}
		out = append(out, c)
		raw = raw[esc+2:]
		esc = bytes.IndexByte(raw, '\\')
	}
	return string(append(out, raw...)), nil
}

// unmarshalString decodes, with encoding/json, the string from start to i.
func (f *jsonScanner) unmarshalString(start int) (string, error) {
	var s string
	if err := json.Unmarshal(f.src[start:f.i], &s); err != nil {
		return "", err
	}
	return s, nil
}
