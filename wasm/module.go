package wasm

import (
	"context"
	"fmt"

	"github.com/mcp-warden/mcp-warden/wasm/internal/host"
)

// Module is a policy.wasm compiled to machine code. It is safe for
// concurrent use; make Pools of it with NewPool.
type Module struct {
	compiled *host.Module
}

// CompileOptions adjusts Compile.
type CompileOptions struct {
	// CacheDir keeps compiled machine code across restarts (created 0700 if
	// missing; anyone who can write it can run code in the gateway). Empty
	// keeps it in memory only.
	CacheDir string
}

// Compile compiles policyWasm, an OPA policy module, to machine code. It
// costs about 100 ms for a typical policy, a few ms when CacheDir already
// holds it. A module that is not WebAssembly, or not an OPA policy module,
// is an error.
func Compile(ctx context.Context, policyWasm []byte, opts CompileOptions) (*Module, error) {
	m, err := host.Compile(ctx, policyWasm, opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("compile policy.wasm: %w", err)
	}
	return &Module{compiled: m}, nil
}

// Close releases the compiled code; Pools made from m must be closed first.
func (m *Module) Close(ctx context.Context) error { return m.compiled.Close(ctx) }
