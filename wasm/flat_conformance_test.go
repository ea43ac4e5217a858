//go:build conformance

package wasm

// flatEvaluations: `make conformance-opa` runs the memory test over a
// million evaluations, without -race.
const flatEvaluations = 1_000_000
