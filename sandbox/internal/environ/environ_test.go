package environ

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBuildLaysDeclaredOverBase(t *testing.T) {
	t.Setenv("MCPW_HOST_ONLY", "x")
	got, err := Build(map[string]string{"HOME": "/srv", "TOKEN": "s3cret=with=equals", "EMPTY": ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"EMPTY=", "HOME=/srv", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", "TOKEN=s3cret=with=equals"}
	if !slices.Equal(got, want) {
		t.Fatalf("Build = %q, want %q", got, want)
	}
	if base, _ := Build(nil); len(base) != len(Base) {
		t.Fatalf("Build(nil) = %q", base)
	}
}

func TestBuildRefuses(t *testing.T) {
	for _, key := range []string{
		"", "A=B", "A\x00B",
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GLIBC_TUNABLES",
		"NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
		"PERL5LIB", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "BASH_ENV", "ENV", "PROMPT_COMMAND",
		"GIT_SSH_COMMAND", "GIT_CONFIG_GLOBAL", "SSH_AUTH_SOCK", "DOCKER_HOST",
		"npm_config_registry", "NPM_CONFIG_REGISTRY", "UV_INDEX_URL",
	} {
		_, err := Build(map[string]string{key: "/value"})
		var re *RefusedError
		if !errors.As(err, &re) || re.Key != key || strings.Contains(err.Error(), "/value") {
			t.Errorf("Build(%q) error = %v; want a RefusedError naming the key, not the value", key, err)
		}
	}
	for _, value := range []string{"a\x00b", "() { :; }"} {
		if _, err := Build(map[string]string{"K": value}); err == nil {
			t.Errorf("Build(K=%q) accepted", value)
		}
	}
	// Declaring a credential is how a server gets its secret.
	if _, err := Build(map[string]string{"GITHUB_TOKEN": "t", "AWS_REGION": "eu-west-1"}); err != nil {
		t.Errorf("declared credentials refused: %v", err)
	}
}

func TestResolveUsesOnlyTheBuiltPATH(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "mcpw-prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH")) // the gateway's PATH must not matter

	if _, err := Resolve("mcpw-prog", []string{"PATH=/usr/bin:/bin"}, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("found through the gateway's PATH: %v", err)
	}
	if got, err := Resolve("mcpw-prog", []string{"PATH=/usr/bin:" + dir}, ""); err != nil || got != prog {
		t.Errorf("Resolve = %q, %v; want %q", got, err, prog)
	}
	// A relative PATH entry would let the working directory pick the program.
	if _, err := Resolve("mcpw-prog", []string{"PATH=."}, dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("relative PATH entry used: %v", err)
	}
	if got, err := Resolve("./mcpw-prog", nil, dir); err != nil || got != "./mcpw-prog" {
		t.Errorf("relative command with dir: %q, %v", got, err)
	}
	if got, err := Resolve("sh", []string{"PATH=/usr/bin:/bin"}, ""); err != nil || !strings.HasSuffix(got, "/sh") {
		t.Errorf("Resolve(sh) = %q, %v", got, err)
	}
	for _, tc := range []struct{ command, dir, want string }{
		{"mcpw-none", "", `command "mcpw-none"`},
		{filepath.Join(dir, "none"), "", `command "` + filepath.Join(dir, "none")},
		{"sh", filepath.Join(dir, "none"), `dir "` + filepath.Join(dir, "none")},
		{"sh", prog, "not a directory"},
		{dir, "", "permission denied"}, // a directory is not a program
	} {
		if _, err := Resolve(tc.command, []string{"PATH=/usr/bin:/bin"}, tc.dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%q, dir %q) = %v; want an error containing %q", tc.command, tc.dir, err, tc.want)
		}
	}
}
