//go:build !conformance

package wasm

// flatEvaluations is how many evaluations TestMemoryStaysFlatAcrossEvaluations
// runs in the ordinary test run (10,000 under -race or -short).
const flatEvaluations = 50_000
