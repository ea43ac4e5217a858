package rego

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// InputPaths returns the parts of `input` that p can read: every path of
// constant keys that a module (imports included) refers to, such as
// ["tool", "upstream_name"] for input.tool.upstream_name, or ["arguments"]
// for input.arguments[k]. A decision of p depends on nothing else of the
// input, so an input reduced to these paths (and everything under them) is
// decided as the whole input is.
//
// It is decided from the source, conservatively: whole is true, and paths
// nil, when p may read the input in a way no path describes: input as a
// whole (x := input, object.get(input, …), walk(input), with input as …), a
// top-level key computed at evaluation (input[k]), or a policy that failed
// to build.
func (p *Policy) InputPaths() (paths [][]string, whole bool) {
	if p == nil || p.err != nil {
		return nil, true
	}
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		if whole {
			return true
		}
		switch v := x.(type) {
		case ast.Ref:
			if !v[0].Equal(ast.InputRootDocument) {
				return false
			}
			var path []string
			for _, t := range v[1:] {
				key, ok := t.Value.(ast.String)
				if !ok {
					break
				}
				path = append(path, string(key))
			}
			if len(path) == 0 {
				whole = true
				return true
			}
			paths = append(paths, path)
			// Later terms may be refs themselves (input.a[input.b]); the
			// head is not visited, since it is not input used whole.
			for _, t := range v[1:] {
				vis.Walk(t)
			}
			return true
		case ast.Var:
			// A bare input: a ref headed by input returned above without
			// visiting its head, so this is input used whole.
			if v.Equal(ast.InputRootDocument.Value) {
				whole = true
				return true
			}
		}
		return false
	})
	for _, m := range p.modules {
		vis.Walk(m.parsed)
		if whole {
			return nil, true
		}
	}
	return paths, false
}

// InputPaths is Policy.InputPaths of the policy wp was compiled from; a
// prebuilt module (LoadWasm), whose source is unknown, reads the whole
// input.
func (wp *WasmPolicy) InputPaths() (paths [][]string, whole bool) {
	if wp == nil || wp.source == nil {
		return nil, true
	}
	return wp.source.InputPaths()
}
