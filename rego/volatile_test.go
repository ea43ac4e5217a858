package rego

import (
	"os"
	"path/filepath"
	"slices"
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

func TestInputPathsAreTheConstantPrefixesOfInputRefs(t *testing.T) {
	paths, whole := Default().InputPaths()
	require.False(t, whole, "the shipped library reads input by constant keys only")
	assert.ElementsMatch(t, [][]string{
		{"action"}, {"server", "name"}, {"tool", "upstream_name"}, {"resource", "uri"}, {"prompt", "upstream_name"},
	}, unique(paths))
	cases := map[string]struct {
		body  string
		paths [][]string // nil: whole input
	}{
		"constant keys":       {`allow if { input.tool.name == "x"; input.principal.claims["time"] == 1 }`, [][]string{{"tool", "name"}, {"principal", "claims", "time"}}},
		"computed inner key":  {`allow if { some k in ["x"]; input.arguments[k] }`, [][]string{{"arguments"}}},
		"ref as a key":        {`allow if input.tool[input.time]`, [][]string{{"tool"}, {"time"}}},
		"field passed whole":  {`allow if walk(input.server, _)`, [][]string{{"server"}}},
		"import":              {"import input.tool as t\n\nallow if t.name", [][]string{{"tool"}}},
		"computed top key":    {`allow if { some k in ["time"]; input[k] }`, nil},
		"whole input":         {`allow if object.get(input, "time", "") != ""`, nil},
		"whole input bound":   {`allow if { x := input; x.tool }`, nil},
		"whole input walked":  {`allow if walk(input, _)`, nil},
		"with input":          {`allow if data.p.x with input as {}` + "\n\nx := true", nil},
		"whole input import":  {"import input\n\nallow if input.tool", nil},
		"whole input in call": {`allow if json.marshal(input) != ""`, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package p\n\n"+c.body+"\n"), 0o600))
			p, err := Load(dir)
			require.NoError(t, err)
			paths, whole := p.InputPaths()
			assert.Equal(t, c.paths == nil, whole)
			assert.ElementsMatch(t, c.paths, unique(paths))
		})
	}
	_, whole = (&WasmPolicy{}).InputPaths()
	assert.True(t, whole, "a prebuilt module reads the whole input")
}

func unique(paths [][]string) [][]string {
	var out [][]string
	for _, p := range paths {
		if !slices.ContainsFunc(out, func(q []string) bool { return slices.Equal(p, q) }) {
			out = append(out, p)
		}
	}
	return out
}
