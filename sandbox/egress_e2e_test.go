package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// A real HTTP client (curl, which honours HTTPS_PROXY as most do), confined
// with an egress allowlist, fetches over HTTPS from an allowed host through
// the proxy, and is refused for a host not on the list and for an allowed
// name that resolves to an internal address; Spec.EgressLog hears each
// decision with host, address and reason. Only the proxy's resolver and
// dialer are test doubles (sandbox.SetEgressNetwork, which exists only in
// this package's tests): "public" names resolve to a documentation address
// that is dialled as a local TLS server. The TLS session is curl's own,
// end to end through the tunnel (-k: the test server's certificate does not
// name the host).
func TestEgressE2EWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	defer upstream.Close()
	public := "203.0.113.7"
	dialed := fakeEgressNetwork(t, map[string]string{
		"api.allowed.test": public, "other.test": public, "inside.allowed.test": "10.1.2.3",
	}, map[string]string{public + ":443": upstream.Listener.Addr().String()})

	var mu sync.Mutex
	var decisions []sandbox.EgressDecision
	key, value := testenv.Marker(t)
	script := `for h in api.allowed.test other.test inside.allowed.test; do
  out=$(` + curl + ` -sS -k --max-time 10 https://$h/ 2>&1); echo "$h: $? $out"
done`
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "fetcher", Command: "sh", Args: []string{"-c", script},
		Env: map[string]string{key: value},
		Profile: sandbox.Profile{Mode: sandbox.ModeRequire,
			Egress: sandbox.Egress{Allow: []string{"api.allowed.test", "*.allowed.test"}}},
		EgressLog: func(d sandbox.EgressDecision) {
			mu.Lock()
			decisions = append(decisions, d)
			mu.Unlock()
		}})
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("no full confinement here: %v", err)
		}
		t.Fatal(err)
	}
	defer p.Close()
	if c := p.Confinement(); c.Network != sandbox.NetworkProxy || !c.NetworkNamespace {
		t.Fatalf("confinement %+v, want network proxy", c)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"api.allowed.test: 0 hello from api.allowed.test", "other.test: ", "inside.allowed.test: "}
	if len(lines) != 3 {
		t.Fatalf("curl said %q", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want prefix %q", i, lines[i], w)
		}
	}
	for _, refused := range lines[1:] {
		if strings.Contains(refused, ": 0 ") || !strings.Contains(refused, "403") {
			t.Errorf("not refused with 403: %q", refused)
		}
	}
	if n := dialed.Load(); n != 1 {
		t.Errorf("the proxy connected %d times, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	wantDecisions := []sandbox.EgressDecision{
		{Server: "fetcher", Host: "api.allowed.test", Port: 443, Address: public + ":443", Allowed: true},
		{Server: "fetcher", Host: "other.test", Port: 443, Reason: "host and port not in the allowlist"},
		{Server: "fetcher", Host: "inside.allowed.test", Port: 443, Address: "10.1.2.3:443",
			Reason: "the host resolves to an internal address (10.1.2.3)"},
	}
	if !slices.Equal(decisions, wantDecisions) {
		t.Errorf("decisions\n%+v\nwant\n%+v", decisions, wantDecisions)
	}
}
