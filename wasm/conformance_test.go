//go:build conformance

package wasm

// OPA's compliance corpus through this package's host, the way OPA's own
// Wasm SDK runs it (internal/wasm/sdk/test/e2e/external_test.go in the OPA
// module): every case compiled to Wasm with OPA's compiler, evaluated here,
// and compared as a set of bindings. The skip list is OPA's own
// exceptions.yaml. Run with `make conformance-opa` (no -race: ~4,400
// module compilations).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/test/cases"
	"github.com/open-policy-agent/opa/v1/types"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/mcp-warden/mcp-warden/wasm/internal/host"
)

// test.sleep is the custom builtin OPA's runner registers: time caching
// cases sleep between two time.now_ns() calls.
func init() {
	rego.RegisterBuiltin1(&rego.Function{
		Name: "test.sleep",
		Decl: types.NewFunction(types.Args(types.S), types.NewNull()),
	}, func(_ rego.BuiltinContext, op *ast.Term) (*ast.Term, error) {
		d, _ := time.ParseDuration(string(op.Value.(ast.String)))
		time.Sleep(d)
		return ast.NullTerm(), nil
	})
}

func TestOPAConformance(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/open-policy-agent/opa").Output()
	if err != nil {
		t.Fatalf("locate the OPA module: %v", err)
	}
	opaDir := strings.TrimSpace(string(out))
	raw, err := os.ReadFile(filepath.Join(opaDir, "internal/wasm/sdk/test/e2e/exceptions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exceptions := map[string]string{}
	if err := util.Unmarshal(raw, &exceptions); err != nil {
		t.Fatal(err)
	}
	for note := range exceptions {
		if strings.Contains(note, "*") {
			t.Fatalf("exceptions.yaml has a pattern (%q); this runner matches notes exactly", note)
		}
	}

	var mu sync.Mutex
	var passed, failed, skipped int
	t.Run("cases", func(t *testing.T) {
		for _, version := range []struct {
			dir string
			v   ast.RegoVersion
		}{{"v0", ast.RegoV0}, {"v1", ast.RegoV1}} {
			dir := filepath.Join(opaDir, "v1/test/cases/testdata", version.dir)
			for _, tc := range cases.MustLoad(dir).Sorted().Cases {
				name := fmt.Sprintf("%s/%s", strings.TrimPrefix(tc.Filename, opaDir+"/"), tc.Note)
				t.Run(name, func(t *testing.T) {
					defer func() {
						mu.Lock()
						defer mu.Unlock()
						switch {
						case t.Skipped():
							skipped++
						case t.Failed():
							failed++
						default:
							passed++
						}
					}()
					if reason, ok := exceptions[tc.Note]; ok {
						t.Skip(reason)
					}
					if len(tc.Env) > 0 {
						for k, v := range tc.Env {
							t.Setenv(k, v)
						}
					} else {
						t.Parallel()
					}
					runCase(t, tc, version.v)
				})
			}
		}
	})
	summary := fmt.Sprintf("%d passed, %d failed, %d skipped", passed, failed, skipped)
	t.Log(summary)
	if path := os.Getenv("OPA_CONFORMANCE_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(summary+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func runCase(t *testing.T, tc cases.TestCase, v ast.RegoVersion) {
	ctx := context.Background()
	caps := ast.CapabilitiesForThisVersion(ast.CapabilitiesExperimentalKeywords(tc.ExperimentalKeywords))
	opts := []func(*rego.Rego){rego.Query(tc.Query), rego.SetRegoVersion(v), rego.Capabilities(caps)}
	for i, m := range tc.Modules {
		opts = append(opts, rego.Module(fmt.Sprintf("module-%d.rego", i), m))
	}
	cr, err := rego.New(opts...).Compile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := host.Compile(ctx, cr.Bytes, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	var data []byte
	if tc.Data != nil {
		if data, err = json.Marshal(*tc.Data); err != nil {
			t.Fatal(err)
		}
	}
	// Every builtin OPA has, I/O included: the corpus tests them all.
	in, err := m.NewInstance(ctx, host.Config{Data: data, MaxMemoryPages: 65535})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)

	var input []byte
	switch {
	case tc.InputTerm != nil:
		input = []byte(ast.MustParseTerm(*tc.InputTerm).String())
	case tc.Input != nil:
		if input, err = json.Marshal(*tc.Input); err != nil {
			t.Fatal(err)
		}
	}
	result, err := in.Eval(ctx, 0, input, host.FormatValue, time.Now())
	check(t, tc, result, err)
}

// check is OPA's e2e assert: results compared as sets of bindings; errors
// visible only in strict mode give an empty result in Wasm; other expected
// errors must be conflicts.
func check(t *testing.T, tc cases.TestCase, result []byte, err error) {
	t.Helper()
	switch {
	case tc.WantDefined != nil:
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		var rs []any
		if err := util.NewJSONDecoder(bytes.NewReader(result)).Decode(&rs); err != nil {
			t.Fatal(err)
		}
		if got := len(rs) > 0; got != *tc.WantDefined {
			t.Fatalf("defined = %v, want %v", got, *tc.WantDefined)
		}
	case tc.WantResult != nil:
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		checkResultSet(t, *tc.WantResult, tc.SortBindings, result)
	case tc.WantErrorCode != nil || tc.WantError != nil:
		if tc.StrictError {
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			checkResultSet(t, []map[string]any{}, false, result)
			return
		}
		if err == nil {
			t.Fatalf("expected error, got result %s", result)
		}
		if tc.WantErrorCode == nil || *tc.WantErrorCode != "eval_conflict_error" {
			t.Fatalf("unmatched error: %v (expected %v)", err, tc.WantErrorCode)
		}
		if !strings.Contains(err.Error(), "var assignment conflict") && !strings.Contains(err.Error(), "object insert conflict") {
			t.Errorf("expected %q to be a conflict", err)
		}
	}
}

func checkResultSet(t *testing.T, want []map[string]any, sortBindings bool, result []byte) {
	t.Helper()
	exp := ast.NewSet()
	for _, b := range want {
		obj := ast.NewObject()
		for k, v := range b {
			obj.Insert(ast.StringTerm(k), ast.NewTerm(ast.MustInterfaceToValue(v)))
		}
		exp.Add(ast.NewTerm(obj))
	}
	// Round trip through JSON, so that sets become arrays as in the
	// expectations.
	j, err := ast.JSONWithOpt(ast.MustParseTerm(string(result)).Value, ast.JSONOpt{SortSets: sortBindings})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(j); err != nil {
		t.Fatal(err)
	}
	got := ast.NewSet()
	ast.MustParseTerm(buf.String()).Value.(*ast.Array).Foreach(func(x *ast.Term) {
		obj := ast.NewObject()
		x.Value.(ast.Object).Foreach(func(k, v *ast.Term) {
			val := v.Value
			if a, ok := v.Value.(*ast.Array); ok && sortBindings {
				val = a.Sorted()
			}
			obj.Insert(k, ast.NewTerm(val))
		})
		got.Add(ast.NewTerm(obj))
	})
	if exp.Compare(got) != 0 {
		t.Fatalf("expected %v but got %v", exp, got)
	}
}
