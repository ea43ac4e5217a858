package policy

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// inputFields is the part of an Input a policy can read (see
// rego.Policy.InputPaths), as a tree of JSON member names: a member
// mapped to nil is read whole. The nil inputFields is the whole input.
//
// Evaluating a policy on the input reduced to these members gives the
// decision the whole input gives, and the engine parses a document of a
// few dozen bytes instead of the whole request: tool descriptions and
// schemas, arguments, claims and confinement, which the default library
// never reads, are left out. The decision log still records the whole
// Input.
type inputFields map[string]inputFields

// newInputFields is the tree of paths; whole gives the whole input, nil.
// No path at all (a policy that never reads its input) gives the empty
// tree: the engine is given {}.
func newInputFields(paths [][]string, whole bool) inputFields {
	if whole {
		return nil
	}
	root := inputFields{}
	for _, path := range paths {
		node := root
		for i, key := range path {
			child, seen := node[key]
			if seen && child == nil {
				break // an enclosing member is read whole already
			}
			if i == len(path)-1 {
				node[key] = nil
				break
			}
			if child == nil {
				child = inputFields{}
				node[key] = child
			}
			node = child
		}
	}
	return root
}

// reads reports whether a policy reading fs reads anything at path
// (member names from the input's root), or under it, or all of what
// encloses it.
func (fs inputFields) reads(path []string) bool {
	node := fs
	for _, key := range path {
		if node == nil {
			return true // read whole
		}
		child, ok := node[key]
		if !ok {
			return false
		}
		node = child
	}
	return node == nil || len(node) > 0
}

// encode returns the JSON encoding of in reduced to fs: what
// json.Marshal(in) gives, less the members fs leaves out.
func (fs inputFields) encode(in *Input) ([]byte, error) {
	if fs == nil {
		return json.Marshal(in)
	}
	return fs.appendValue(make([]byte, 0, 256), reflect.ValueOf(in).Elem())
}

// appendValue writes v reduced to fs: structs by their JSON member names
// (omitempty as encoding/json has it), string-keyed maps by key, anything
// else (and any value under a member read whole) as json.Marshal writes it.
func (fs inputFields) appendValue(b []byte, v reflect.Value) ([]byte, error) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		v = v.Elem()
	}
	switch {
	case fs == nil:
	case v.Kind() == reflect.Struct:
		b = append(b, '{')
		first := true
		for _, f := range jsonFieldsOf(v.Type()) {
			sub, read := fs[f.name]
			fv := v.Field(f.index)
			if !read || (f.omitEmpty && auditlog.IsEmpty(fv)) {
				continue
			}
			b = appendKey(b, f.name, first)
			first = false
			var err error
			if b, err = sub.appendValue(b, fv); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String:
		b = append(b, '{')
		first := true
		for name, sub := range fs {
			fv := v.MapIndex(reflect.ValueOf(name).Convert(v.Type().Key()))
			if !fv.IsValid() {
				continue
			}
			b = appendKey(b, name, first)
			first = false
			var err error
			if b, err = sub.appendValue(b, fv); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	// Read whole, or not a document with members (a path into a string,
	// say, reads nothing more than the value). Strings and booleans, what
	// policies mostly read, are written without encoding/json's reflection
	// (the same JSON value; AppendString escapes as the log does).
	switch v.Kind() {
	case reflect.String:
		return auditlog.AppendString(b, v.String()), nil
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), nil
	}
	enc, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, err
	}
	return append(b, enc...), nil
}

func appendKey(b []byte, name string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	return append(auditlog.AppendString(b, name), ':')
}

// jsonField is one struct field as encoding/json names it.
type jsonField struct {
	name      string
	index     int
	omitEmpty bool
}

var jsonFieldCache sync.Map // reflect.Type → []jsonField

// jsonFieldsOf lists t's exported fields under their JSON names. The
// gateway's Input types use plain `json:"name,omitempty"` tags only
// (no embedding, no "-", no string option).
func jsonFieldsOf(t reflect.Type) []jsonField {
	if fs, ok := jsonFieldCache.Load(t); ok {
		return fs.([]jsonField)
	}
	var fs []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, jsonField{name: name, index: i, omitEmpty: strings.Contains(opts, "omitempty")})
	}
	jsonFieldCache.Store(t, fs)
	return fs
}

// evaluation is an engine's answer: the entry point's value and what the
// non-deterministic builtins it called returned (OPA's nd_builtin_cache
// JSON; nil when none was, or the engine does not record them).
type evaluation struct {
	value            any
	nondeterministic []byte
}

// prunedInputEngine is implemented by the engines of this package, which
// know from their policy's source what it reads of an Input. The Decider
// hands them that part only, through evaluatePruned, which is Evaluate
// of an input already reduced to inputFields.
type prunedInputEngine interface {
	inputFields() inputFields
	evaluatePruned(ctx context.Context, input []byte) (evaluation, error)
	// concurrency is how many evaluations it runs at once.
	concurrency() int
}
