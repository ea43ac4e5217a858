package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// conformanceSuites are the official suite versions and the era each
// scores, with the everything-server mode their baseline runs against.
var conformanceSuites = []struct {
	era, version, requirements string
	stateless                  bool
}{
	{era: "2025-11-25", version: "0.1.16"},
	{era: "2026-07-28", version: "0.2.0-alpha.12", requirements: "2026-07-28", stateless: true},
}

// TestConformance runs the official MCP conformance suite of each era
// against the go-sdk everything-server directly (the baseline), then
// through the gateway (allow-all policy, tools unprefixed) with the same
// server as a stdio upstream and as an HTTP upstream, and requires every
// scenario's checks to end as in the baseline. It is slow and runs Node, so
// it runs only with MCP_CONFORMANCE=1 (make conformance-mcp); the summary
// goes to .cache/conformance/summary.txt.
func TestConformance(t *testing.T) {
	if os.Getenv("MCP_CONFORMANCE") == "" {
		t.Skip("set MCP_CONFORMANCE=1 to run the MCP conformance suite (make conformance-mcp)")
	}
	everything := testenv.BuildGo(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	allowAll, err := rego.Load(filepath.Join(testenv.RepoRoot(t), "testdata", "policies", "allow-all"))
	require.NoError(t, err)

	var summary []string
	runs, equal := 0, 0
	for _, suite := range conformanceSuites {
		t.Run(suite.era, func(t *testing.T) {
			direct := startEverythingHTTP(t, everything, suite.stateless)
			baseline := runConformance(t, suite.version, suite.requirements, direct)
			require.NotEmpty(t, baseline, "the baseline run produced no results")
			line := fmt.Sprintf("%s (conformance %s): direct %s", suite.era, suite.version, baseline.counts())

			upstreams := []struct {
				name   string
				server ServerConfig
			}{
				{"stdio upstream", ServerConfig{Name: "everything", Command: everything}},
				{"http upstream", ServerConfig{Name: "everything", URL: direct, AllowPrivateNetwork: true}},
			}
			for _, up := range upstreams {
				g, _ := startGateway(t, &Config{Naming: NamingFirst, Servers: []ServerConfig{up.server}}, WithPolicy(allowAll))
				got := runConformance(t, suite.version, suite.requirements, serveHTTP(t, g)+"/mcp")
				diffs := baseline.diff(got)
				for _, d := range diffs {
					t.Errorf("%s through the gateway (%s): %s", suite.era, up.name, d)
				}
				line += fmt.Sprintf("; gateway/%s %s, %d scenario(s) differ", strings.TrimSuffix(up.name, " upstream"), got.counts(), countScenarios(diffs))
				runs += len(baseline)
				equal += len(baseline) - countScenarios(diffs)
			}
			summary = append(summary, line)
		})
	}
	summary = append(summary, fmt.Sprintf("conformance: the gateway ends %d of %d scenario runs as the baseline does", equal, runs))
	out := strings.Join(summary, "\n") + "\n"
	t.Log("\n" + out)
	dir := filepath.Join(testenv.RepoRoot(t), ".cache", "conformance")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(out), 0o644))
}

// conformanceResult maps a scenario to each of its checks.
type conformanceResult map[string]map[string]conformanceCheck

type conformanceCheck struct{ status, message string }

func (r conformanceResult) counts() string {
	passed, total := 0, 0
	for _, checks := range r {
		for _, c := range checks {
			total++
			if c.status == "SUCCESS" {
				passed++
			}
		}
	}
	return fmt.Sprintf("%d/%d checks passed in %d scenarios", passed, total, len(r))
}

// diff lists, scenario by scenario, where got does not end as r did.
func (r conformanceResult) diff(got conformanceResult) []string {
	var out []string
	for _, scenario := range slices.Sorted(func(yield func(string) bool) {
		for s := range r {
			if !yield(s) {
				return
			}
		}
	}) {
		want := r[scenario]
		have, ok := got[scenario]
		if !ok {
			out = append(out, scenario+": not run")
			continue
		}
		for id, c := range want {
			if have[id].status != c.status {
				out = append(out, fmt.Sprintf("%s: check %s is %q, baseline %q %s", scenario, id, have[id].status, c.status, have[id].message))
			}
		}
		for id, c := range have {
			if _, ok := want[id]; !ok {
				out = append(out, fmt.Sprintf("%s: check %s (%s) is not in the baseline %s", scenario, id, c.status, c.message))
			}
		}
	}
	return out
}

func countScenarios(diffs []string) int {
	seen := map[string]bool{}
	for _, d := range diffs {
		seen[strings.SplitN(d, ":", 2)[0]] = true
	}
	return len(seen)
}

var scenarioDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// runConformance runs the suite's server scenarios against url and reads
// back each scenario's checks.
func runConformance(t *testing.T, version, requirements, url string) conformanceResult {
	t.Helper()
	node, args := testenv.Conformance(t, version)
	out := t.TempDir()
	args = append(args, "server", "--url", url, "-o", out)
	if requirements != "" {
		args = append(args, "--requirements", requirements)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	// The suite exits non-zero when any check fails (the baseline has
	// unscored failures): the results are what counts.
	log, _ := cmd.CombinedOutput()
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	res := conformanceResult{}
	for _, e := range entries {
		m := scenarioDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(out, e.Name(), "checks.json"))
		require.NoError(t, err)
		var checks []struct{ ID, Status, ErrorMessage string }
		require.NoError(t, json.Unmarshal(data, &checks), "%s", e.Name())
		res[m[1]] = map[string]conformanceCheck{}
		for i, c := range checks {
			res[m[1]][fmt.Sprintf("%s#%d", c.ID, i)] = conformanceCheck{c.Status, c.ErrorMessage}
		}
	}
	if len(res) == 0 {
		t.Fatalf("conformance %s against %s: no results\n%s", version, url, log)
	}
	return res
}

// startEverythingHTTP runs the everything-server on a free loopback port
// and returns its endpoint once it answers.
func startEverythingHTTP(t *testing.T, exe string, stateless bool) string {
	t.Helper()
	addr := startOnFreePort(t, func(addr string) *exec.Cmd {
		return exec.Command(exe, "-http", addr, fmt.Sprintf("-stateless=%v", stateless))
	})
	return "http://" + addr + "/mcp"
}

// startOnFreePort starts the server command makes for a free loopback
// address, tagged with the test's marker, and returns the address once it
// accepts connections. The server is killed, and proven gone, when the test
// ends.
func startOnFreePort(t *testing.T, command func(addr string) *exec.Cmd) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := command(addr)
	key, value := testenv.Marker(t)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, key+"="+value)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		testenv.RequireNoProcess(t, key, value)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		require.True(t, time.Now().Before(deadline), "%s did not listen on %s", cmd.Path, addr)
		time.Sleep(20 * time.Millisecond)
	}
}

// serveHTTP serves g's HTTP face on a loopback port, as Run does, and
// returns its base URL.
func serveHTTP(t *testing.T, g *Gateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := newHTTPServer(g.HTTPHandler(alice))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { g.shutdownHTTP([]*http.Server{srv}) })
	return "http://" + ln.Addr().String()
}
