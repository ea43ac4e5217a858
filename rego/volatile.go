package rego

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Volatile reports whether a decision of p may differ between two inputs
// that differ only in the named top-level input fields (such as "time"),
// so that a decision cannot be reused for an input that differs only in
// them. It is decided from the source, conservatively: p is volatile when
// a module (imports included) refers to one of the fields (input.time,
// input["time"]), to input with a key computed at evaluation
// (input[k]), or to input as a whole (object.get(input, …), x := input), or
// calls a non-deterministic builtin (time.now_ns, rand.intn, uuid.rfc4122,
// …). A policy that failed to build is volatile.
func (p *Policy) Volatile(fields ...string) bool {
	if p == nil || p.err != nil {
		return true
	}
	volatile := false
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		if volatile {
			return true
		}
		switch v := x.(type) {
		case ast.Ref:
			if v[0].Equal(ast.InputRootDocument) {
				// input.<field>…: only the first key matters; keys
				// deeper in are inside a field that is known.
				if len(v) < 2 {
					volatile = true
					return true
				}
				key, ok := v[1].Value.(ast.String)
				if !ok || slices.Contains(fields, string(key)) {
					volatile = true
					return true
				}
				// Later terms may be refs themselves (input.a[input.time]);
				// the head is not visited, since it is not input used whole.
				for _, t := range v[2:] {
					vis.Walk(t)
				}
				return true
			}
			if b, ok := ast.BuiltinMap[v.String()]; ok && b.Nondeterministic {
				volatile = true
				return true
			}
		case ast.Var:
			// A bare input: a ref headed by input returned above without
			// visiting its head, so this is input used whole.
			if v.Equal(ast.InputRootDocument.Value) {
				volatile = true
				return true
			}
		}
		return false
	})
	for _, m := range p.modules {
		vis.Walk(m.parsed)
		if volatile {
			return true
		}
	}
	return false
}
