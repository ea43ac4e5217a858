package rego

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/lineage"
)

// Test runs the Rego unit tests (test_* rules) found in paths, as
// `opa test paths...` does: every .rego file and every JSON or YAML data
// file under each path is loaded, the modules compiled together (strict
// mode, which `opa test` does not use), and each test run with a 5 s
// timeout.
//
// The report is written to w in `opa test` format; verbose lists every test
// and the notes of failures, like `opa test -v`. A test that fails or ends
// in an error counts as failed; skipped tests (todo_test_*) are not
// counted. Parametrized tests count each leaf case, as `opa test` does.
// Loading, parse and compile errors are returned as err, naming the file
// and line.
func Test(ctx context.Context, paths []string, w io.Writer, verbose bool) (passed, failed int, err error) {
	return runTests(ctx, nil, paths, w, verbose)
}

// runTests is Test over fsys (nil: the OS file system).
func runTests(ctx context.Context, fsys fs.FS, paths []string, w io.Writer, verbose bool) (passed, failed int, err error) {
	if len(paths) == 0 {
		return 0, 0, errors.New("test: no paths")
	}
	if w == nil {
		w = io.Discard
	}
	loaded, err := loader.NewFileLoader().
		WithFS(fsys).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotation(true).
		Filtered(paths, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("test %s: %w", strings.Join(paths, " "), err)
	}
	modules := make(map[string]*ast.Module, len(loaded.Modules))
	for name, m := range loaded.Modules {
		modules[name] = m.Parsed
	}

	store := inmem.NewFromObjectWithOpts(loaded.Documents, inmem.OptRoundTripOnWrite(false))
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return 0, 0, err
	}
	defer store.Abort(ctx, txn)

	runner := tester.NewRunner().
		SetCompiler(newCompiler(true).WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn))).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		EnableTracing(verbose).
		StackTraces(true)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return 0, 0, fmt.Errorf("test %s: %w", strings.Join(paths, " "), err)
	}

	// Results arrive in completion order; report them in file order.
	var results []*tester.Result
	for r := range ch {
		if verbose {
			r.Trace = lineage.Filter(r.Trace, func(e *topdown.Event) bool {
				return e.Op == topdown.NoteOp || e.Op == topdown.FailOp
			})
		}
		results = append(results, r)
		p, f := count(r)
		passed += p
		failed += f
	}
	slices.SortFunc(results, func(a, b *tester.Result) int {
		if a.Location == nil || b.Location == nil {
			return strings.Compare(a.Name, b.Name)
		}
		return cmp.Or(strings.Compare(a.Location.File, b.Location.File), cmp.Compare(a.Location.Row, b.Location.Row))
	})
	sorted := make(chan *tester.Result, len(results))
	for _, r := range results {
		sorted <- r
	}
	close(sorted)
	if err := (tester.PrettyReporter{Output: w, Verbose: verbose}).Report(sorted); err != nil {
		return passed, failed, fmt.Errorf("test report: %w", err)
	}
	return passed, failed, nil
}

// count returns how many tests r passed and failed, counted as
// tester.PrettyReporter counts them, with errors as failures.
func count(r *tester.Result) (passed, failed int) {
	switch {
	case r.Skip:
		return 0, 0
	case r.Error != nil:
		return 0, 1
	case len(r.SubResults) > 0:
		for _, sr := range r.SubResults.Iter {
			if len(sr.SubResults) > 0 {
				continue // only leaves are counted
			}
			if sr.Fail {
				failed++
			} else {
				passed++
			}
		}
		return passed, failed
	case r.Pass():
		return 1, 0
	default:
		return 0, 1
	}
}
