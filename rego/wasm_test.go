package rego

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

func TestCompileWasm(t *testing.T) {
	ctx := context.Background()
	wp, err := CompileWasm(ctx, Demo(), "data.mcp.warden.decision", []string{"http.send"})
	require.NoError(t, err)
	require.Equal(t, []byte("\x00asm"), wp.Module[:4])
	require.Equal(t, []string{"mcp/warden/decision"}, wp.Entrypoints)
	require.Equal(t, Demo().Revision(), wp.Revision, "the same policy, the same revision, whatever the engine")
	// Compiling does not change the shared policy: it compiles again.
	_, err = CompileWasm(ctx, Demo(), "mcp/warden/decision", nil)
	require.NoError(t, err)

	doc, err := wp.DataJSON(map[string]any{"warden": map[string]any{"servers": map[string]any{}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"warden":{"servers":{}}}`, string(doc))
}

func TestCompileWasmRefusesBuiltins(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.rego"), []byte(`package mcp.warden
decision := {"allow": http.send({"method": "GET", "url": "http://127.0.0.1:1/"}).status_code == 200}
`), 0o600))
	p, err := Load(dir)
	require.NoError(t, err)
	_, err = CompileWasm(context.Background(), p, "data.mcp.warden.decision", []string{"http.send"})
	require.ErrorContains(t, err, "http.send")
}

// TestLoadWasmReadsWhatOPABuilds loads a bundle built by the real OPA CLI
// with `opa build -t wasm`.
func TestLoadWasmReadsWhatOPABuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the OPA CLI")
	}
	opa := testenv.BuildGo(t, "github.com/open-policy-agent/opa")
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	cmd := exec.Command(opa, "build", "-t", "wasm", "-e", "mcp/warden/decision", "--ignore", "*_test.rego", "-o", out, "rego/testdata/custom")
	cmd.Dir = testenv.RepoRoot(t)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)

	wp, err := LoadWasm(out)
	require.NoError(t, err)
	require.Equal(t, []byte("\x00asm"), wp.Module[:4])
	require.Equal(t, []string{"mcp/warden/decision"}, wp.Entrypoints)
	// opa build puts every JSON file into the bundle's data.json.
	require.Equal(t, `map[trusted:[echo add]]`, fmtValue(wp.Data["warden"]))
	require.Len(t, wp.Revision, 64)

	// The rego engine refuses it and says what to do.
	_, err = Load(out)
	require.ErrorContains(t, err, "set policy.engine: wasm")
	// Rego source is not a Wasm bundle.
	_, err = LoadWasm("testdata/custom")
	require.ErrorIs(t, err, ErrNoWasmModule)
}
