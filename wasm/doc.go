// Package wasm evaluates OPA policies compiled to WebAssembly (`opa build
// -t wasm`, or rego.CompileWasm) with mcp-warden's own host for OPA's Wasm
// ABI (1.2 and later) on wazero's compiler.
//
// The flow is Compile → NewPool → Pool.Eval:
//
//   - Compile turns policy.wasm into machine code once (or finds it in a
//     compilation cache directory) and checks it is an OPA policy module.
//     It first rewrites the module to test an interrupt flag at every
//     function entry and loop header, which is how a deadline stops it.
//   - NewPool makes a bounded set of instances of it, each with the data
//     document parsed into its memory once, and checks the entry point, the
//     ABI version and the builtins the policy calls.
//   - Pool.Eval evaluates the entry point for one JSON input on a free
//     instance: three calls into Wasm, no recompilation, and no memory
//     growth from one evaluation to the next.
//
// Builtins OPA implements in Wasm run there; the others are dispatched to
// OPA's own Go implementations, except the I/O builtins in RefusedBuiltins,
// which a policy may not call at all. Each evaluation has a deadline and
// each instance a memory cap: a policy that loops or exhausts memory fails
// with ErrTimeout or ErrMemoryLimit, and its instance is replaced.
package wasm
