// Package rego holds mcp-warden's Rego: the embedded default policy library
// (library/), the demo rules (demo/), and their evaluation with OPA's
// topdown evaluator.
//
// The flow is Load (or Default, Demo) → Prepare → Query.Eval:
//
//   - A Policy is a set of parsed, compile-checked Rego modules plus base
//     data, identified by a Revision. It is immutable and safe to share.
//   - Prepare compiles a Policy once for one rule (normally
//     data.mcp.warden.decision) with the data the gateway adds
//     (data.warden.servers), into a Query.
//   - Query.Eval evaluates that rule for one JSON input document; it
//     recompiles nothing and is safe for concurrent use.
//
// Test runs a policy's Rego unit tests the way `opa test` does.
//
// All Rego is OPA v1 syntax (rego.v1 semantics) compiled in strict mode.
package rego
