package rego

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/util"
)

// WasmPolicy is a policy compiled to WebAssembly for OPA's Wasm ABI: the
// module, the entry points it was built with, and the base data it is to be
// evaluated with (Wasm modules carry no data). It is immutable.
type WasmPolicy struct {
	// Module is policy.wasm.
	Module []byte
	// Entrypoints are the entry points built in, in slash form
	// ("mcp/warden/decision").
	Entrypoints []string
	// Data is the policy's base data, as encoding/json decodes it with
	// UseNumber.
	Data map[string]any
	// Revision identifies the policy: the Policy's revision when compiled
	// from one, else the hex sha256 of the module and data.
	Revision string
	// source is the Policy compiled from, nil for a prebuilt module.
	source *Policy
}

// ErrNoWasmModule is returned by LoadWasm for a policy without policy.wasm
// (a directory or bundle of Rego source, to compile with CompileWasm).
var ErrNoWasmModule = errors.New("no policy.wasm")

// CompileWasm compiles p to WebAssembly with OPA's compiler, with one entry
// point (a rule reference such as data.mcp.warden.decision, or its slash
// form), without the builtins named in refuse: a policy calling one of them
// fails to compile. It costs about a second for the default library.
func CompileWasm(ctx context.Context, p *Policy, entrypoint string, refuse []string) (*WasmPolicy, error) {
	if p == nil {
		return nil, errors.New("compile to wasm: nil policy")
	}
	if p.err != nil {
		return nil, fmt.Errorf("compile to wasm: %w", p.err)
	}
	ep := slashEntrypoint(entrypoint)
	caps := ast.CapabilitiesForThisVersion()
	caps.Builtins = slices.DeleteFunc(slices.Clone(caps.Builtins), func(b *ast.Builtin) bool {
		return slices.Contains(refuse, b.Name)
	})
	b := &bundle.Bundle{Data: map[string]any{}}
	for _, m := range p.modules {
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: m.file, Path: m.file, RelativePath: m.rel, Raw: m.raw, Parsed: m.parsed.Copy()})
	}
	c := compile.New().
		WithTarget(compile.TargetWasm).
		WithRegoVersion(ast.RegoV1).
		WithCapabilities(caps).
		WithEntrypoints(ep).
		WithBundle(b)
	if err := c.Build(ctx); err != nil {
		return nil, fmt.Errorf("compile %s to wasm: %w", ep, regoErrors(err))
	}
	out := c.Bundle()
	if len(out.WasmModules) != 1 {
		return nil, fmt.Errorf("compile %s to wasm: OPA built %d modules, want 1", ep, len(out.WasmModules))
	}
	return &WasmPolicy{Module: out.WasmModules[0].Raw, Entrypoints: []string{ep}, Data: p.data, Revision: p.revision, source: p}, nil
}

// slashEntrypoint turns data.a.b into a/b; a/b is kept.
func slashEntrypoint(rule string) string {
	if ref, err := ast.ParseRef(rule); err == nil && ref.HasPrefix(ast.DefaultRootRef) && strings.Contains(rule, ".") {
		parts := make([]string, 0, len(ref)-1)
		for _, t := range ref[1:] {
			s, ok := t.Value.(ast.String)
			if !ok {
				return rule
			}
			parts = append(parts, string(s))
		}
		return strings.Join(parts, "/")
	}
	return rule
}

// LoadWasm reads a bundle built with `opa build -t wasm` (a .tar.gz, or a
// directory holding policy.wasm): the module, the entry points of its
// manifest and its data (data.json files, as in Load). Rego sources in it
// are ignored. A policy without policy.wasm gives ErrNoWasmModule.
func LoadWasm(path string) (*WasmPolicy, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load wasm policy: %w", err)
	}
	if !info.IsDir() && !strings.HasSuffix(path, ".tar.gz") && !strings.HasSuffix(path, ".tgz") {
		return nil, fmt.Errorf("load wasm policy %s: not a directory or a .tar.gz bundle", path)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("load wasm policy: %w", err)
	}
	b, err := loader.NewFileLoader().
		WithRegoVersion(ast.RegoV1).
		WithSkipBundleVerification(true).
		WithFollowSymlinks(true).
		WithFilter(skipFiles(resolved, true)).
		AsBundle(resolved)
	if err != nil {
		return nil, fmt.Errorf("load wasm policy %s: %w", path, regoErrors(err))
	}
	switch {
	case len(b.WasmModules) == 0:
		return nil, fmt.Errorf("load wasm policy %s: %w", path, ErrNoWasmModule)
	case len(b.WasmModules) > 1:
		return nil, fmt.Errorf("load wasm policy %s: %d Wasm modules, only one is supported", path, len(b.WasmModules))
	case len(b.Patch.Data) > 0:
		return nil, fmt.Errorf("load wasm policy %s: delta bundles are not supported", path)
	}
	wp := &WasmPolicy{Module: b.WasmModules[0].Raw, Data: b.Data}
	for _, r := range b.Manifest.WasmResolvers {
		wp.Entrypoints = append(wp.Entrypoints, r.Entrypoint)
	}
	if wp.Data == nil {
		wp.Data = map[string]any{}
	}
	h := sha256.New()
	h.Write([]byte("wasm\n"))
	h.Write(wp.Module)
	h.Write([]byte("\ndata\n"))
	var data bytes.Buffer
	if err := json.NewEncoder(&data).Encode(wp.Data); err != nil {
		return nil, fmt.Errorf("load wasm policy %s: data: %w", path, err)
	}
	h.Write(data.Bytes())
	wp.Revision = hex.EncodeToString(h.Sum(nil))
	return wp, nil
}

// DataJSON returns the policy's base data with data merged in at the root
// (as Prepare merges it), encoded as the JSON document a Wasm evaluation
// is given.
func (wp *WasmPolicy) DataJSON(data map[string]any) ([]byte, error) {
	var extra any = data
	if err := util.RoundTrip(&extra); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	extraData, _ := extra.(map[string]any)
	merged, err := mergeData(wp.Data, extraData)
	if err != nil {
		return nil, fmt.Errorf("data: %w (set by both the policy and the gateway)", err)
	}
	return json.Marshal(merged)
}

// Volatile is Policy.Volatile of the policy wp was compiled from; a
// prebuilt module (LoadWasm), whose source is unknown, is volatile.
func (wp *WasmPolicy) Volatile(fields ...string) bool {
	if wp == nil || wp.source == nil {
		return true
	}
	return wp.source.Volatile(fields...)
}
