package rego

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/loader"
)

// embedded holds the default library and the demo rules, tests included
// (Test can run them; policies built from them leave the tests out).
//
//go:embed library demo
var embedded embed.FS

// Policy is a set of Rego modules plus base data, identified by a revision.
//
// A Policy is immutable once built and safe for concurrent use. Its modules
// have been parsed and compiled (strict mode) once, so a Policy that exists
// is known to compile; Prepare compiles it again with the query and data.
// Rego unit tests (*_test.rego) are never part of a Policy: Test loads them.
type Policy struct {
	modules  []module
	data     map[string]any // JSON values as encoding/json decodes them with UseNumber
	revision string
	// err is set only for an embedded policy that fails to build (a bug
	// caught by this package's tests); Prepare returns it.
	err error
}

// module is one Rego file of a Policy.
type module struct {
	file   string // the name errors use: the path it was loaded from
	rel    string // its path inside its bundle or directory, which the revision hashes
	raw    []byte
	parsed *ast.Module
}

var (
	defaultPolicy = sync.OnceValue(func() *Policy { return embeddedPolicy("library") })
	demoPolicy    = sync.OnceValue(func() *Policy { return embeddedPolicy("library", "demo") })
)

// Default returns the embedded default policy (rego/library): the entry
// point data.mcp.warden.decision, exposure from data.warden.servers, and
// denials from `deny` rules. It returns the same Policy on every call.
func Default() *Policy { return defaultPolicy() }

// Demo returns Default plus the demo rules (rego/demo) for the demo MCP
// server, as `make run` uses. It returns the same Policy on every call.
func Demo() *Policy { return demoPolicy() }

// Load reads a policy from path: a directory, or an OPA bundle (.tar.gz).
//
// Both are read as OPA reads a bundle: every .rego file except *_test.rego
// (at least one is required), and data from files named data.json or
// data.yaml, placed under data at their directory's path
// (dir/warden/data.json is data.warden). Other files and hidden directories
// are left out. Links to files are followed, so that a Kubernetes ConfigMap
// volume loads as expected. Bundles with Wasm modules, plans or delta
// patches are refused, and signatures are not verified.
//
// Parse and compile errors name the file and line.
func Load(path string) (*Policy, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	if !info.IsDir() && !strings.HasSuffix(path, ".tar.gz") && !strings.HasSuffix(path, ".tgz") {
		return nil, fmt.Errorf("load policy %s: not a directory or a .tar.gz bundle", path)
	}
	// OPA's directory reader takes a root that is a link for a file.
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	b, err := readBundle(nil, resolved)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", path, regoErrors(err))
	}
	if len(b.Modules) == 0 {
		return nil, fmt.Errorf("load policy %s: no .rego files (other than tests)", path)
	}
	p, err := newPolicy(modulesOf(b, ""), b.Data)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", path, err)
	}
	return p, nil
}

// Revision returns the hex sha256 of the policy's modules (their paths
// inside the policy directory or bundle, and their bytes) and base data. It
// depends on nothing else, so the same files give the same revision on any
// machine.
func (p *Policy) Revision() string { return p.revision }

// embeddedPolicy builds the policy of the embedded directories dirs.
func embeddedPolicy(dirs ...string) *Policy {
	var modules []module
	data := map[string]any{}
	for _, dir := range dirs {
		b, err := readBundle(embedded, dir)
		if err != nil {
			return &Policy{err: fmt.Errorf("embedded policy %s: %w", dir, err)}
		}
		modules = append(modules, modulesOf(b, dir)...)
		if data, err = mergeData(data, b.Data); err != nil {
			return &Policy{err: fmt.Errorf("embedded policy %s: %w", dir, err)}
		}
	}
	p, err := newPolicy(modules, data)
	if err != nil {
		return &Policy{err: fmt.Errorf("embedded policy: %w", err)}
	}
	return p
}

// readBundle reads path in fsys (nil: the OS file system) as OPA reads a
// bundle, leaving out Rego tests.
func readBundle(fsys fs.FS, path string) (*bundle.Bundle, error) {
	b, err := loader.NewFileLoader().
		WithFS(fsys).
		WithRegoVersion(ast.RegoV1).
		WithSkipBundleVerification(true).
		WithFollowSymlinks(true).
		WithFilter(skipFiles(path, fsys == nil)).
		AsBundle(path)
	if err != nil {
		return nil, err
	}
	switch {
	case len(b.WasmModules) > 0 || len(b.Wasm) > 0:
		return nil, errors.New("bundle has Wasm modules, which the rego engine cannot run (set policy.engine: wasm)")
	case len(b.PlanModules) > 0:
		return nil, errors.New("bundle has plan modules, which the rego engine cannot run")
	case len(b.Patch.Data) > 0:
		return nil, errors.New("delta bundles are not supported")
	}
	return b, nil
}

// skipFiles returns the filter of the files under root that are not part
// of a policy: Rego tests, hidden directories (.git; the ..2026_05_01…
// directory of a Kubernetes ConfigMap volume, whose files are also linked
// at the top), and, on disk, links to directories, which OPA's reader would
// try to read as files.
func skipFiles(root string, onDisk bool) loader.Filter {
	root = filepath.Clean(root)
	return func(path string, info fs.FileInfo, _ int) bool {
		switch {
		case filepath.Clean(filepath.FromSlash(path)) == root:
			return false
		case info.IsDir():
			return strings.HasPrefix(info.Name(), ".")
		case strings.HasSuffix(info.Name(), "_test.rego"):
			return true
		case onDisk && info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Stat(path)
			return err == nil && target.IsDir()
		}
		return false
	}
}

// modulesOf returns the modules of b, their relative paths under prefix.
func modulesOf(b *bundle.Bundle, prefix string) []module {
	ms := make([]module, 0, len(b.Modules))
	for _, m := range b.Modules {
		rel := strings.TrimPrefix(m.RelativePath, "/")
		if prefix != "" {
			rel = prefix + "/" + rel
		}
		ms = append(ms, module{file: m.Path, rel: rel, raw: m.Raw, parsed: m.Parsed})
	}
	return ms
}

// newPolicy checks that modules compile and computes the revision.
func newPolicy(modules []module, data map[string]any) (*Policy, error) {
	slices.SortFunc(modules, func(a, b module) int {
		return cmp.Or(strings.Compare(a.rel, b.rel), bytes.Compare(a.raw, b.raw))
	})
	if data == nil {
		data = map[string]any{}
	}
	p := &Policy{modules: modules, data: data}
	c := newCompiler(false)
	if c.Compile(p.parsedModules()); c.Failed() {
		return nil, c.Errors
	}
	revision, err := revisionOf(modules, data)
	if err != nil {
		return nil, err
	}
	p.revision = revision
	return p, nil
}

// parsedModules returns the modules keyed by file name, as the compiler
// takes them.
func (p *Policy) parsedModules() map[string]*ast.Module {
	m := make(map[string]*ast.Module, len(p.modules))
	for _, mod := range p.modules {
		m[mod.file] = mod.parsed
	}
	return m
}

// revisionOf hashes each module as "module <rel> <len>\n<raw>" in sorted
// order, then "data\n" and the data as JSON (encoding/json sorts object
// keys, so the encoding is canonical).
func revisionOf(modules []module, data map[string]any) (string, error) {
	h := sha256.New()
	for _, m := range modules {
		h.Write([]byte("module " + strconv.Quote(m.rel) + " " + strconv.Itoa(len(m.raw)) + "\n"))
		h.Write(m.raw)
	}
	h.Write([]byte("data\n"))
	if err := json.NewEncoder(h).Encode(data); err != nil {
		return "", fmt.Errorf("policy data: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// regoErrors returns the Rego errors (file:line: message) that err wraps,
// or err: OPA wraps them in messages about bundle activation that would
// only confuse someone who wrote a directory of .rego files.
func regoErrors(err error) error {
	if errs, ok := errors.AsType[ast.Errors](err); ok {
		return errs
	}
	return err
}

// newCompiler returns the compiler configuration every policy is compiled
// with: OPA v1 syntax, strict mode, type checking with annotations. print()
// is kept for tests only; elsewhere its calls are erased.
func newCompiler(printStatements bool) *ast.Compiler {
	return ast.NewCompiler().
		WithDefaultRegoVersion(ast.RegoV1).
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithStrict(true).
		WithUseTypeCheckAnnotations(true).
		WithEnablePrintStatements(printStatements)
}
