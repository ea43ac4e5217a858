package rego

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Volatile reports whether a decision of p may differ between two inputs
// that differ only in the named top-level input fields (such as "time"),
// so that a decision cannot be reused for an input that differs only in
// them. It is decided from the source, conservatively: p is volatile when
// it may read one of the fields (see InputPaths: input.time,
// input["time"], input with a key computed at evaluation, input as a
// whole), or calls a non-deterministic builtin (time.now_ns, rand.intn,
// uuid.rfc4122, …). A policy that failed to build is volatile.
func (p *Policy) Volatile(fields ...string) bool {
	paths, whole := p.InputPaths()
	if whole || slices.ContainsFunc(paths, func(path []string) bool { return slices.Contains(fields, path[0]) }) {
		return true
	}
	volatile := false
	vis := ast.NewGenericVisitor(func(x any) bool {
		if r, ok := x.(ast.Ref); ok && !volatile {
			if b, ok := ast.BuiltinMap[r.String()]; ok && b.Nondeterministic {
				volatile = true
			}
		}
		return volatile
	})
	for _, m := range p.modules {
		vis.Walk(m.parsed)
	}
	return volatile
}
