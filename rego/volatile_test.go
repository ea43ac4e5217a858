package rego

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVolatileFindsReadsOfTheNamedInputFields(t *testing.T) {
	fields := []string{"time", "request_id", "session_id"}
	assert.False(t, Default().Volatile(fields...), "the shipped library reads none of them")
	assert.False(t, Demo().Volatile(fields...))
	cases := map[string]struct {
		body     string
		volatile bool
	}{
		"other fields":        {`allow if { input.tool.name == "x"; input.principal.claims.time == 1 }`, false},
		"input.time":          {`allow if input.time > "2026"`, true},
		"input[string]":       {`allow if input["request_id"] == "1"`, true},
		"session_id":          {`allow if { s := input.session_id; s != "" }`, true},
		"computed key":        {`allow if { some k in ["time"]; input[k] }`, true},
		"nested computed key": {`allow if data.x[input.time]`, true},
		"inside a field ref":  {`allow if input.tool[input.time]`, true},
		"whole input":         {`allow if object.get(input, "time", "") != ""`, true},
		"whole input bound":   {`allow if { x := input; x.tool }`, true},
		"now":                 {`allow if time.now_ns() > 0`, true},
		"random":              {`allow if rand.intn("x", 10) == 1`, true},
		"deterministic call":  {`allow if startswith(input.tool.name, "x")`, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package p\n\n"+c.body+"\n"), 0o600))
			p, err := Load(dir)
			require.NoError(t, err)
			assert.Equal(t, c.volatile, p.Volatile(fields...))
		})
	}
	t.Run("import", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package p\n\nimport input.time as now\n\nallow if now\n"), 0o600))
		p, err := Load(dir)
		require.NoError(t, err)
		assert.True(t, p.Volatile(fields...))
	})
	assert.True(t, (&WasmPolicy{}).Volatile(fields...), "a prebuilt module is volatile")
}
