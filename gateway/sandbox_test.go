package gateway

import (
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// A confined stdio server with an egress allowlist asks the gateway's proxy
// for a host not on the list and for an allowed name that resolves to
// loopback (the system resolver's "localhost"), then runs a real MCP
// server. The gateway logs both refusals with server, host, port, address
// and reason, and the server starts. (The allowed path is proven in the
// sandbox package, where the proxy's network can be replaced in tests.)
func TestEgressDecisionsInGatewayLog(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	srv := everythingStdio(t)
	script := `for h in not-listed.example localhost; do ` + curl + ` -sk --max-time 10 https://$h/ >/dev/null 2>&1; done; exec "$0"`
	srv.Args = []string{"-c", script, srv.Command}
	srv.Command = "sh"
	srv.Sandbox = sandbox.Profile{ReadOnly: []string{srv.Args[2]}, Egress: sandbox.Egress{Allow: []string{"localhost"}}}
	var oplog testenv.Buffer
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{srv}}, WithLogger(slog.New(slog.NewTextHandler(&oplog, nil))))
	st := g.Status()
	require.Len(t, st, 1)
	require.True(t, st[0].Running, "%v", st[0].Err)
	if !strings.Contains(oplog.String(), "confinement=strong") {
		t.Skipf("no full confinement here: %s", oplog.String())
	}
	logged := oplog.String()
	assert.Contains(t, logged, `msg="egress refused" server=everything host=not-listed.example port=443 address="" reason="host and port not in the allowlist"`)
	assert.Regexp(t, `msg="egress refused" server=everything host=localhost port=443 address="?(127\.0\.0\.1|\[::1\]):443"? reason="the host resolves to an internal address`, logged)
	assert.NotContains(t, logged, "egress allowed")
}
