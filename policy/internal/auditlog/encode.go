package auditlog

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// AppendCanonical appends v, encoded as encoding/json would encode it
// (json struct tags, omitempty, embedded structs, Marshaler types), but
// directly in the canonical form: members sorted, no whitespace, minimal
// escapes. It equals canonicalizing json.Marshal(v), without producing and
// re-reading the intermediate text; types with their own MarshalJSON or
// MarshalText are marshalled and canonicalized that way. The dynamic
// values of decoded JSON (map[string]any, []any, string, float64, bool,
// json.Number) take a path without reflection.
func AppendCanonical(dst []byte, v any) ([]byte, error) {
	e := encoder{out: dst}
	if err := e.dynamic(v, 0); err != nil {
		return nil, err
	}
	return e.out, nil
}

// AppendString appends s as a canonical JSON string, with invalid UTF-8
// replaced by U+FFFD as encoding/json does.
func AppendString(dst []byte, s string) []byte { return appendValidString(dst, s) }

// AppendPrevHash appends the "prev_hash" member of a record encoded by
// hand, with a placeholder value that Writer.AppendEncoded replaces, and
// returns where that value starts (the PrevAt of Encoded).
func AppendPrevHash(dst []byte) ([]byte, int) {
	dst = append(dst, `"prev_hash":"`...)
	at := len(dst)
	dst = append(dst, Genesis...)
	return append(dst, '"'), at
}

type encoder struct {
	out []byte
}

// dynamic encodes v, looking at the types decoded JSON is made of before
// falling back to reflection.
func (e *encoder) dynamic(v any, depth int) error {
	if depth > maxDepth {
		return errors.New("encode: nesting too deep")
	}
	switch x := v.(type) {
	case nil:
		e.out = append(e.out, "null"...)
	case string:
		e.out = appendValidString(e.out, x)
	case bool:
		e.out = strconv.AppendBool(e.out, x)
	case float64:
		return e.float(x, 64)
	case int:
		e.out = strconv.AppendInt(e.out, int64(x), 10)
	case int64:
		e.out = strconv.AppendInt(e.out, x, 10)
	case []any:
		if x == nil {
			e.out = append(e.out, "null"...)
			return nil
		}
		e.out = append(e.out, '[')
		for i, el := range x {
			if i > 0 {
				e.out = append(e.out, ',')
			}
			if err := e.dynamic(el, depth+1); err != nil {
				return err
			}
		}
		e.out = append(e.out, ']')
	case map[string]any:
		return stringMap(e, x, depth, func(v any) error { return e.dynamic(v, depth+1) })
	case map[string]string:
		return stringMap(e, x, depth, func(v string) error { e.out = appendValidString(e.out, v); return nil })
	case map[string]int64:
		return stringMap(e, x, depth, func(v int64) error { e.out = strconv.AppendInt(e.out, v, 10); return nil })
	default:
		return e.value(reflect.ValueOf(v), depth)
	}
	return nil
}

// stringMap writes a map with string keys sorted, each value with val;
// keys are gathered on the stack for the usual small maps. A key with
// invalid UTF-8 (repaired keys may collide) takes the reflective way.
func stringMap[V any](e *encoder, m map[string]V, depth int, val func(V) error) error {
	if m == nil {
		e.out = append(e.out, "null"...)
		return nil
	}
	type kv struct {
		k string
		v V
	}
	var stack [16]kv
	members := stack[:0]
	for k, v := range m {
		if !utf8.ValidString(k) {
			return e.mapValue(reflect.ValueOf(m), depth)
		}
		members = append(members, kv{k, v})
	}
	slices.SortFunc(members, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	e.out = append(e.out, '{')
	for i, m := range members {
		if i > 0 {
			e.out = append(e.out, ',')
		}
		e.out = appendString(e.out, m.k)
		e.out = append(e.out, ':')
		if err := val(m.v); err != nil {
			return err
		}
	}
	e.out = append(e.out, '}')
	return nil
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	numberType        = reflect.TypeFor[json.Number]()
)

func (e *encoder) value(v reflect.Value, depth int) error {
	if depth > maxDepth {
		return errors.New("encode: nesting too deep")
	}
	if !v.IsValid() {
		e.out = append(e.out, "null"...)
		return nil
	}
	t := v.Type()
	if t == numberType {
		s := v.String()
		if s == "" {
			s = "0"
		}
		if !json.Valid([]byte(s)) || strings.ContainsAny(s, "{}[]\",tfn") {
			return fmt.Errorf("encode: invalid number literal %q", s)
		}
		e.out = append(e.out, s...)
		return nil
	}
	if marshals(t) && (t.Kind() != reflect.Pointer || !v.IsNil()) {
		return e.marshalled(v, depth)
	}
	switch t.Kind() {
	case reflect.Bool:
		e.out = strconv.AppendBool(e.out, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.out = strconv.AppendInt(e.out, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.out = strconv.AppendUint(e.out, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return e.float(v.Float(), t.Bits())
	case reflect.String:
		e.out = appendValidString(e.out, v.String())
	case reflect.Interface:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		if v.CanInterface() {
			return e.dynamic(v.Interface(), depth)
		}
		return e.value(v.Elem(), depth)
	case reflect.Pointer:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		return e.value(v.Elem(), depth)
	case reflect.Slice:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(marshalerType) && !reflect.PointerTo(t.Elem()).Implements(textMarshalerType) {
			e.out = append(e.out, '"')
			e.out = base64.StdEncoding.AppendEncode(e.out, v.Bytes())
			e.out = append(e.out, '"')
			return nil
		}
		return e.array(v, depth)
	case reflect.Array:
		return e.array(v, depth)
	case reflect.Map:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		return e.mapValue(v, depth)
	case reflect.Struct:
		return e.structValue(v, depth)
	default:
		return fmt.Errorf("encode: unsupported type %s", t)
	}
	return nil
}

// marshalled encodes a value with its own MarshalJSON or MarshalText the
// slow way: marshal, then canonicalize the text.
func (e *encoder) marshalled(v reflect.Value, depth int) error {
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	c := canonicalizer{src: b, out: e.out}
	c.skipSpace()
	if err := c.value(depth); err != nil {
		return err
	}
	e.out = c.out
	return nil
}

// float writes f as encoding/json does (shortest round-trip digits,
// exponent form outside [1e-6, 1e21)).
func (e *encoder) float(f float64, bits int) error {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("encode: unsupported value %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	e.out = strconv.AppendFloat(e.out, f, format, -1, bits)
	if format == 'e' {
		if n := len(e.out); n >= 4 && e.out[n-4] == 'e' && e.out[n-3] == '-' && e.out[n-2] == '0' {
			e.out[n-2] = e.out[n-1]
			e.out = e.out[:n-1]
		}
	}
	return nil
}

func (e *encoder) array(v reflect.Value, depth int) error {
	e.out = append(e.out, '[')
	for i := range v.Len() {
		if i > 0 {
			e.out = append(e.out, ',')
		}
		if err := e.value(v.Index(i), depth+1); err != nil {
			return err
		}
	}
	e.out = append(e.out, ']')
	return nil
}

// member is one key of an object being written, and where its value is.
type encMember struct {
	key   string
	value reflect.Value
}

func (e *encoder) mapValue(v reflect.Value, depth int) error {
	kt := v.Type().Key()
	members := make([]encMember, 0, v.Len())
	iter := v.MapRange()
	for iter.Next() {
		k := iter.Key()
		var key string
		switch {
		case kt.Kind() == reflect.String:
			key = k.String()
		case kt.Implements(textMarshalerType):
			b, err := k.Interface().(encoding.TextMarshaler).MarshalText()
			if err != nil {
				return fmt.Errorf("encode: map key: %w", err)
			}
			key = string(b)
		case kt.Kind() >= reflect.Int && kt.Kind() <= reflect.Int64:
			key = strconv.FormatInt(k.Int(), 10)
		case kt.Kind() >= reflect.Uint && kt.Kind() <= reflect.Uintptr:
			key = strconv.FormatUint(k.Uint(), 10)
		default:
			return fmt.Errorf("encode: unsupported map key type %s", kt)
		}
		members = append(members, encMember{key: toValidUTF8(key), value: iter.Value()})
	}
	return e.object(members, depth)
}

// structValue writes a struct's fields, which cachedFields keeps sorted
// by name, so no sorting happens per value.
func (e *encoder) structValue(v reflect.Value, depth int) error {
	fields := cachedFields(v.Type())
	e.out = append(e.out, '{')
	n := 0
	for _, f := range fields {
		fv, ok := fieldByIndex(v, f.index)
		if !ok || f.omitEmpty && IsEmpty(fv) || f.omitZero && fv.IsZero() {
			continue
		}
		if n > 0 {
			e.out = append(e.out, ',')
		}
		e.out = append(e.out, f.quoted...)
		if err := e.value(fv, depth+1); err != nil {
			return err
		}
		n++
	}
	e.out = append(e.out, '}')
	return nil
}

var marshalsCache sync.Map // reflect.Type → bool

// marshals reports whether t has its own MarshalJSON or MarshalText
// (interfaces are looked through, not asked).
func marshals(t reflect.Type) bool {
	if t.Kind() == reflect.Interface {
		return false
	}
	if m, ok := marshalsCache.Load(t); ok {
		return m.(bool)
	}
	m := t.Implements(marshalerType) || t.Implements(textMarshalerType)
	marshalsCache.Store(t, m)
	return m
}

func (e *encoder) object(members []encMember, depth int) error {
	slices.SortFunc(members, func(a, b encMember) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return fmt.Errorf("encode: duplicate key %q", members[i].key)
		}
	}
	e.out = append(e.out, '{')
	for i, m := range members {
		if i > 0 {
			e.out = append(e.out, ',')
		}
		e.out = appendValidString(e.out, m.key)
		e.out = append(e.out, ':')
		if err := e.value(m.value, depth+1); err != nil {
			return err
		}
	}
	e.out = append(e.out, '}')
	return nil
}

// field is one encoded field of a struct type, as encoding/json sees it.
type field struct {
	name                string
	quoted              []byte // "name":
	index               []int
	omitEmpty, omitZero bool
	tagged              bool
}

var fieldCache sync.Map // reflect.Type → []field

func cachedFields(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	f, _ := fieldCache.LoadOrStore(t, typeFields(t))
	return f.([]field)
}

// typeFields lists t's fields by encoding/json's rules: exported fields and
// embedded structs' promoted fields; of several fields with one name, the
// shallowest wins, a tagged one among equals, and otherwise none.
func typeFields(t reflect.Type) []field {
	var all []field
	var walk func(t reflect.Type, index []int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, index []int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			if sf.Anonymous {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
				if name == "" && ft.Kind() == reflect.Struct {
					walk(ft, idx, seen)
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			f := field{name: name, index: idx, tagged: name != ""}
			if name == "" {
				f.name = sf.Name
			}
			for o := range strings.SplitSeq(opts, ",") {
				f.omitEmpty = f.omitEmpty || o == "omitempty"
				f.omitZero = f.omitZero || o == "omitzero"
			}
			all = append(all, f)
		}
		delete(seen, t)
	}
	walk(t, nil, map[reflect.Type]bool{})
	byName := map[string][]field{}
	var names []string
	for _, f := range all {
		if _, ok := byName[f.name]; !ok {
			names = append(names, f.name)
		}
		byName[f.name] = append(byName[f.name], f)
	}
	var out []field
	for _, name := range names {
		fs := byName[name]
		minDepth := len(fs[0].index)
		for _, f := range fs {
			minDepth = min(minDepth, len(f.index))
		}
		var dominant []field
		for _, f := range fs {
			if len(f.index) == minDepth {
				dominant = append(dominant, f)
			}
		}
		if len(dominant) > 1 {
			var tagged []field
			for _, f := range dominant {
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
			dominant = tagged
		}
		if len(dominant) == 1 {
			f := dominant[0]
			f.quoted = append(appendValidString(nil, f.name), ':')
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b field) int { return strings.Compare(a.name, b.name) })
	return out
}

// fieldByIndex follows index, reporting false at a nil embedded pointer.
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// IsEmpty reports whether encoding/json's omitempty leaves v out (a
// struct never is).
func IsEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// appendValidString writes s canonically, with invalid UTF-8 replaced by
// U+FFFD as encoding/json does.
func appendValidString(dst []byte, s string) []byte {
	if plainPrefix(s) == len(s) { // the usual case: nothing to escape or repair
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	return appendString(dst, toValidUTF8(s))
}

// toValidUTF8 replaces each byte of an invalid sequence by U+FFFD, as
// encoding/json does (strings.ToValidUTF8 would replace whole runs).
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
