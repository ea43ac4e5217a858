package sandbox_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

// Check lists every protection, egress through the proxy included; as root
// on this kernel each is available and the level is strong. With network
// host, the proxy is reported unavailable and why.
func TestCheckReportsEveryProtectionAndEgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := sandbox.Check(ctx, sandbox.Profile{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	byName := map[string]sandbox.Protection{}
	for _, p := range r.Protections {
		byName[p.Name] = p
	}
	eg, ok := byName["egress proxy"]
	if !ok {
		t.Fatalf("no egress line:\n%s", out.String())
	}
	if os.Geteuid() == 0 {
		if !eg.Available || r.Confinement.Level != sandbox.LevelStrong || !strings.Contains(out.String(), "level: strong") {
			t.Errorf("as root, want strong with the egress proxy:\n%s", out.String())
		}
	}
	r, err = sandbox.Check(ctx, sandbox.Profile{Network: sandbox.NetworkHost})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Protections {
		if p.Name == "egress proxy" && (p.Available || !strings.Contains(p.Detail, "network host")) {
			t.Errorf("network host: %+v", p)
		}
	}
}

// Under the default profile a server may write to /dev/null, /dev/zero and
// /dev/full and read /dev/zero and /dev/urandom (runtimes and os/exec open
// them for their children's stdio), but not write to /dev/urandom.
func TestDefaultProfileDevices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "devices", Command: "sh", Args: []string{"-c",
		`echo x >/dev/null && echo x >/dev/zero && head -c1 /dev/zero >/dev/null && head -c1 /dev/urandom >/dev/null && echo ok
(echo x >/dev/urandom) 2>/dev/null && echo urandom-writable; true`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "ok\n" {
		t.Errorf("got %q, %v; want ok", out, err)
	}
}

// A server spawned without a working directory gets the gateway's, even
// when it lies under a directory the sandbox masks (a checkout under /tmp):
// a child the server starts there can enter it by its path.
func TestWorkingDirectoryUnderMaskedTmp(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "cwd", Command: "sh", Args: []string{"-c", `cd "$(pwd -P)" && pwd -P`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != dir+"\n" {
		t.Errorf("got %q, %v; want %q", out, err, dir+"\n")
	}
}
