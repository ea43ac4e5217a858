package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const modulePath = "github.com/mcp-warden/mcp-warden"

var repoRoot = sync.OnceValues(findRepoRoot)

// RepoRoot returns the root directory of the mcp-warden module: the nearest
// directory at or above the working directory (for a test, its package
// directory) whose go.mod declares module github.com/mcp-warden/mcp-warden.
// It is computed once per process; it fails the test if there is none.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := repoRoot()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return root
}

func findRepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		// A go.mod of another module (a fixture module, say) is not ours: keep walking.
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declaresModule(data, modulePath) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find repository root: no go.mod of module %s at or above %s", modulePath, wd)
		}
	}
}

func declaresModule(gomod []byte, want string) bool {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(name), `"`) == want
		}
	}
	return false
}

type goBuild struct {
	once sync.Once
	exe  string
	err  error
}

var goBuilds sync.Map // package as given to BuildGo → *goBuild

// BuildGo builds the Go main package pkg with `go build` run from the
// repository root and returns the path of the executable. pkg is an import
// path ("github.com/modelcontextprotocol/go-sdk/conformance/everything-server",
// whose module must be in go.mod) or a path relative to the repository root
// ("./testdata/servers/stubborn", "./cmd/mcp-warden").
//
// The first call for a package in a test process builds it into
// <repo>/.cache/bin/<package>/; later calls, and failures, are remembered.
// go build leaves an up-to-date executable alone, so with a warm build cache
// a call costs well under a second; a cold one can take tens of seconds.
// Test binaries of different packages building the same package take turns
// through a file lock, so none of them sees a half-written executable.
// A failed build fails the test with go build's output.
func BuildGo(tb testing.TB, pkg string) string {
	tb.Helper()
	root := RepoRoot(tb)
	v, _ := goBuilds.LoadOrStore(pkg, new(goBuild))
	b := v.(*goBuild)
	b.once.Do(func() { b.exe, b.err = buildGo(root, pkg) })
	if b.err != nil {
		tb.Fatalf("testenv: %v", b.err)
	}
	return b.exe
}

func buildGo(root, pkg string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: the go command is not on PATH: %w", pkg, err)
	}
	dir := filepath.Join(root, ".cache", "bin", buildDirName(pkg))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	unlock, err := flockPath(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	defer unlock()

	exe := filepath.Join(dir, exeName(pkg))
	cmd := exec.Command(goTool, "build", "-o", exe, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s %s (in %s): %w\n%s", exe, pkg, root, err, out)
	}
	return exe, nil
}

// buildDirName turns a package path into one directory name, so that
// fixtures with the same last element do not overwrite each other.
func buildDirName(pkg string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, pkg)
	if name = strings.TrimLeft(name, "._"); name == "" {
		return "root"
	}
	return name
}

func exeName(pkg string) string {
	if base := path.Base(filepath.ToSlash(pkg)); base != "." && base != ".." && base != "/" {
		return base
	}
	return "main"
}

// flockPath takes an exclusive flock on the file at p, creating it, and
// returns the function that releases it. It blocks while another process
// holds the lock; the kernel releases it if the holder dies.
func flockPath(p string) (unlock func(), err error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the lock
}
