package rego

import (
	"fmt"
	"maps"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// mergeData returns the deep merge of two data documents, neither of which
// is modified. Objects merge key by key; any other value present in both is
// a conflict, since neither side may silently override the other.
func mergeData(a, b map[string]any) (map[string]any, error) {
	return mergeObjects(a, b, ast.Ref{ast.DefaultRootDocument})
}

func mergeObjects(a, b map[string]any, at ast.Ref) (map[string]any, error) {
	merged := maps.Clone(a)
	if merged == nil {
		merged = make(map[string]any, len(b))
	}
	// Sorted, so that the conflict reported is always the same one.
	for _, k := range slices.Sorted(maps.Keys(b)) {
		bv := b[k]
		av, ok := merged[k]
		if !ok {
			merged[k] = bv
			continue
		}
		path := append(at[:len(at):len(at)], ast.StringTerm(k))
		ao, aIsObject := av.(map[string]any)
		bo, bIsObject := bv.(map[string]any)
		if !aIsObject || !bIsObject {
			return nil, fmt.Errorf("%v is defined twice", path)
		}
		m, err := mergeObjects(ao, bo, path)
		if err != nil {
			return nil, err
		}
		merged[k] = m
	}
	return merged, nil
}
