package sandbox_test

import (
	"context"
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
