package sandbox_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// The default profile plus one egress entry is enough for `npx -y`: npm
// (which honours HTTPS_PROXY) downloads server-memory from the registry
// through the gateway's proxy into the server's private /tmp, and the server
// answers an MCP initialize, fully confined. Needs npx and the registry
// (reachable from the gateway's network); skipped otherwise.
func TestNpxServerWithEgressAllowlist(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads from the npm registry")
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, "registry.npmjs.org"); err != nil {
		t.Skipf("npm registry not resolvable: %v", err)
	}
	key, value := testenv.Marker(t)
	var stderr testenv.Buffer
	var allowed atomic.Int32
	p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "memory", Command: "npx",
		Args: []string{"-y", "@modelcontextprotocol/server-memory@2026.8.31"}, Env: map[string]string{key: value},
		Stderr:  &stderr,
		Profile: sandbox.Profile{Mode: sandbox.ModeRequire, Egress: sandbox.Egress{Allow: []string{"registry.npmjs.org"}}},
		EgressLog: func(d sandbox.EgressDecision) {
			if d.Allowed && d.Host == "registry.npmjs.org" {
				allowed.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Close()
		testenv.RequireNoProcess(t, key, value)
	}()
	_, err = io.WriteString(p.Stdin(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil || !strings.Contains(line, `"serverInfo"`) {
		t.Fatalf("initialize answer %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	if c := p.Confinement(); c.Network != sandbox.NetworkProxy || allowed.Load() == 0 {
		t.Errorf("network %q, %d allowed connections to the registry", c.Network, allowed.Load())
	}
}
