package rego

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"
)

func TestDefaultAndDemoBuild(t *testing.T) {
	for name, p := range map[string]*Policy{"Default": Default(), "Demo": Demo()} {
		if p.err != nil {
			t.Fatalf("%s: %v", name, p.err)
		}
		if len(p.Revision()) != 64 {
			t.Errorf("%s: revision %q is not a hex sha256", name, p.Revision())
		}
		for _, m := range p.modules {
			if strings.HasSuffix(m.file, "_test.rego") {
				t.Errorf("%s: test module %s is part of the policy", name, m.file)
			}
		}
	}
	if Default() != Default() {
		t.Error("Default returns a new Policy on each call")
	}
	if Default().Revision() == Demo().Revision() {
		t.Error("Default and Demo have the same revision")
	}
	if got := embeddedPolicy("library").Revision(); got != Default().Revision() {
		t.Errorf("revision is not stable: %s, then %s", Default().Revision(), got)
	}
}

func TestLoadDirectory(t *testing.T) {
	p, err := Load("testdata/custom")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.modules) != 1 || p.modules[0].rel != "policy.rego" {
		t.Errorf("modules = %+v, want only policy.rego (tests left out)", p.modules)
	}
	// data.json under warden/ is data.warden; notes.json is not data.
	want := `map[warden:map[trusted:[echo add]]]`
	if got := fmtValue(p.data); got != want {
		t.Errorf("data = %s, want %s", got, want)
	}

	// The revision depends on the files, not on where they are.
	moved := copyDir(t, "testdata/custom")
	p2, err := Load(moved)
	if err != nil {
		t.Fatal(err)
	}
	if p.Revision() != p2.Revision() {
		t.Errorf("same files, different revisions: %s and %s", p.Revision(), p2.Revision())
	}
	if err := os.WriteFile(filepath.Join(moved, "warden", "data.json"), []byte(`{"trusted": ["echo"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p3, err := Load(moved)
	if err != nil {
		t.Fatal(err)
	}
	if p3.Revision() == p.Revision() {
		t.Error("changing data.json left the revision unchanged")
	}
}

func TestLoadKubernetesConfigMapVolume(t *testing.T) {
	// A ConfigMap volume: the files in a hidden directory, reached through
	// a ..data link and one link per file; the volume itself is often
	// reached through a link too.
	dir := t.TempDir()
	volume := filepath.Join(dir, "volume")
	files := filepath.Join(volume, "..2026_05_01_12_00_00.123")
	if err := os.MkdirAll(files, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, files, "policy.rego", readFile(t, "testdata/custom/policy.rego"))
	writeFile(t, files, "data.json", `{"warden": {"trusted": ["echo"]}}`)
	for _, link := range []struct{ target, name string }{
		{filepath.Base(files), "volume/..data"},
		{"..data/policy.rego", "volume/policy.rego"},
		{"..data/data.json", "volume/data.json"},
		{"volume", "current"},
	} {
		if err := os.Symlink(link.target, filepath.Join(dir, link.name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{volume, filepath.Join(dir, "current")} {
		p, err := Load(path)
		if err != nil {
			t.Errorf("Load(%s): %v", path, err)
			continue
		}
		if len(p.modules) != 1 || p.modules[0].rel != "policy.rego" {
			t.Errorf("Load(%s) modules = %+v, want policy.rego once", path, p.modules)
		}
		if got := fmtValue(p.data); got != "map[warden:map[trusted:[echo]]]" {
			t.Errorf("Load(%s) data = %s", path, got)
		}
	}
}

func TestLoadBundle(t *testing.T) {
	raw, err := os.ReadFile("testdata/custom/policy.rego")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = bundle.NewWriter(&buf).UseModulePath(true).DisableFormat(true).Write(bundle.Bundle{
		Data:    map[string]any{"warden": map[string]any{"trusted": []any{"echo", "add"}}},
		Modules: []bundle.ModuleFile{{URL: "/policy.rego", Path: "/policy.rego", Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.tar.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Prepare(context.Background(), p, "data.mcp.warden.decision", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := q.Eval(context.Background(), []byte(`{"tool": {"upstream_name": "add"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := fmtValue(got); s != "map[allow:true reason:trusted weight:1.5]" {
		t.Errorf("decision = %s", s)
	}

	// A bundle and a directory with the same files have the same revision.
	dir, err := Load("testdata/custom")
	if err != nil {
		t.Fatal(err)
	}
	if p.Revision() != dir.Revision() {
		t.Errorf("bundle revision %s != directory revision %s", p.Revision(), dir.Revision())
	}
}

func TestLoadErrors(t *testing.T) {
	notGzip := filepath.Join(t.TempDir(), "bad.tar.gz")
	if err := os.WriteFile(notGzip, []byte("not a gzip stream"), 0o644); err != nil {
		t.Fatal(err)
	}
	brokenTest := copyDir(t, "testdata/custom")
	if err := os.WriteFile(filepath.Join(brokenTest, "more_test.rego"), []byte("package x\n\ntest_x if {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(brokenTest); err != nil {
		t.Errorf("a broken *_test.rego file fails Load, but tests are not part of a policy: %v", err)
	}

	for _, tc := range []struct {
		path string
		want []string // substrings of the error
	}{
		{"testdata/nonexistent", []string{"testdata/nonexistent", "no such file or directory"}},
		{"testdata/broken", []string{"testdata/broken/broken.rego:", "rego_parse_error"}},
		{"testdata/unsafe", []string{"testdata/unsafe/unsafe.rego:4:", "var user is unsafe"}},
		{"testdata/custom/policy.rego", []string{"not a directory or a .tar.gz bundle"}},
		{"testdata/custom/warden", []string{"testdata/custom/warden: no .rego files"}},
		{notGzip, []string{notGzip, "gzip"}},
	} {
		p, err := Load(tc.path)
		if err == nil {
			t.Errorf("Load(%s) = %v, want an error", tc.path, p)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Load(%s) error %q does not contain %q", tc.path, err, want)
			}
		}
	}
}

func TestMergeData(t *testing.T) {
	a := map[string]any{"warden": map[string]any{"trusted": []any{"echo"}}, "x": "1"}
	b := map[string]any{"warden": map[string]any{"servers": map[string]any{}}, "y": "2"}
	merged, err := mergeData(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtValue(merged), "map[warden:map[servers:map[] trusted:[echo]] x:1 y:2]"; got != want {
		t.Errorf("merged = %s, want %s", got, want)
	}
	if got := fmtValue(a); got != "map[warden:map[trusted:[echo]] x:1]" {
		t.Errorf("mergeData modified its input: %s", got)
	}

	_, err = mergeData(a, map[string]any{"warden": map[string]any{"trusted": []any{"add"}}})
	if err == nil || !strings.Contains(err.Error(), "data.warden.trusted is defined twice") {
		t.Errorf("conflict error = %v", err)
	}
}

// copyDir copies the regular files of dir, recursively, into a new
// temporary directory and returns it.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := os.CopyFS(dst, os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
