package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// serverProcesses counts the live processes of g's first configured
// server (started by startGateway, which marks them) that run command: the
// base name of their program and their first arguments, as in
// "mcp-warden demo-server" (not the sandbox's init, which runs it).
func serverProcesses(g *Gateway, command string) int {
	n := 0
	for _, p := range testenv.Processes(testenv.MarkerKey, g.cfg.Servers[0].Env[testenv.MarkerKey]) {
		if len(p.Argv) == 0 {
			continue
		}
		short := strings.Join(append([]string{filepath.Base(p.Argv[0])}, p.Argv[1:]...), " ")
		if short == command || strings.HasPrefix(short, command+" ") {
			n++
		}
	}
	return n
}

// instancesGauge is mcp_warden_upstream_instances of server as g's
// metrics handler reports it ("" when absent).
func instancesGauge(g *Gateway, server string) string {
	rec := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return sample(rec.Body.String(), `mcp_warden_upstream_instances{server="`+server+`"}`)
}

// TestPerPrincipalInstancesKeepEachPrincipalsState: the demo server keeps
// its notes in memory. Shared, one principal's reset_notes deletes every
// principal's notes; per principal, each principal has an instance of
// its own (besides the one the gateway lists from), and a reset touches only
// the resetting principal's notes. Every process ends with the gateway.
func TestPerPrincipalInstancesKeepEachPrincipalsState(t *testing.T) {
	alice := policy.Principal{ID: "alice", AuthMethod: AuthAPIKey}
	bob := policy.Principal{ID: "bob", AuthMethod: AuthAPIKey}
	read := func(t *testing.T, g *Gateway, p policy.Principal) string {
		t.Helper()
		res, err := g.CallTool(context.Background(), p, "demo__read_note", map[string]any{"name": "welcome"})
		require.NoError(t, err)
		return text(t, res)
	}
	for _, per := range []string{InstancesShared, InstancesPerPrincipal} {
		t.Run(per, func(t *testing.T) {
			sc := demoServer(t)
			sc.Tools = ToolFilter{Allow: []string{"*"}}
			sc.Instances = InstancesConfig{Per: per}
			g, _ := startGateway(t, &Config{Servers: []ServerConfig{sc}})
			require.Contains(t, read(t, g, alice), "Welcome")
			require.Contains(t, read(t, g, bob), "Welcome")
			_, err := g.CallTool(context.Background(), alice, "demo__reset_notes", nil)
			require.NoError(t, err)
			assert.NotContains(t, read(t, g, alice), "Welcome", "alice reset her notes")
			if per == InstancesShared {
				assert.NotContains(t, read(t, g, bob), "Welcome", "one server: alice's reset is bob's too")
				assert.Equal(t, 2, serverProcesses(g, "mcp-warden demo-server"), "one instance: a process per era")
				assert.Empty(t, instancesGauge(g, "demo"), "no instances series for a shared server")
				return
			}
			assert.Contains(t, read(t, g, bob), "Welcome", "bob's notes are his own")
			assert.Equal(t, 3*2, serverProcesses(g, "mcp-warden demo-server"),
				"the listing instance, alice's and bob's; the demo server speaks both eras, a process each")
			assert.Equal(t, 2, g.upstreams[0].instances.count())
			assert.Equal(t, "2", instancesGauge(g, "demo"))
			// The same principal over another transport is the same principal.
			viaREST := alice
			viaREST.Transport = "rest"
			assert.NotContains(t, read(t, g, viaREST), "Welcome")
			assert.Equal(t, 3*2, serverProcesses(g, "mcp-warden demo-server"))
		})
	}
}

// TestPerPrincipalInstancesAreBoundedAndStopWhenIdle: with room for one
// instance, a second principal is refused while the first one's call is in
// flight, and gets the room (the idle instance is stopped) once it ended;
// an instance left idle for the idle timeout is stopped, and the next
// request starts one again.
func TestPerPrincipalInstancesAreBoundedAndStopWhenIdle(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{{Name: "asker", Command: asker,
		Tools:     ToolFilter{Allow: []string{"*"}},
		Instances: InstancesConfig{Per: InstancesPerPrincipal, Max: 1, IdleTimeout: time.Second}}}})
	alice := policy.Principal{ID: "alice", AuthMethod: AuthAPIKey}
	bob := policy.Principal{ID: "bob", AuthMethod: AuthAPIKey}
	instances := g.upstreams[0].instances
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	holdCtx, stopHold := context.WithCancel(ctx)
	held := make(chan struct{})
	go func() {
		defer close(held)
		_, _ = g.CallTool(holdCtx, alice, "asker__hold", map[string]any{"text": "alice holds"})
	}()
	require.Eventually(t, func() bool {
		for _, u := range instances.all() {
			if u.calls.inFlight() {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "alice's call is in flight on her instance")

	res, err := g.CallTool(ctx, bob, "asker__note", map[string]any{"text": "bob", "together": 1})
	require.NoError(t, err)
	require.True(t, res.IsError)
	assert.Contains(t, text(t, res), "every per-principal instance of the server is busy")
	assert.Equal(t, 2, serverProcesses(g, "asker"), "no process started for bob")

	stopHold()
	<-held
	res, err = g.CallTool(ctx, bob, "asker__note", map[string]any{"text": "bob", "together": 1})
	require.NoError(t, err)
	assert.Equal(t, "noted", text(t, res), "alice's idle instance made room for bob's")
	assert.Equal(t, 1, instances.count())
	require.Eventually(t, func() bool { return serverProcesses(g, "asker") == 2 }, 10*time.Second, 20*time.Millisecond,
		"alice's instance stopped")

	require.Eventually(t, func() bool { return instances.count() == 0 && serverProcesses(g, "asker") == 1 },
		10*time.Second, 20*time.Millisecond, "bob's instance stops once idle")
	assert.Equal(t, "0", instancesGauge(g, "asker"))
	res, err = g.CallTool(ctx, bob, "asker__note", map[string]any{"text": "bob again", "together": 1})
	require.NoError(t, err)
	assert.Equal(t, "noted", text(t, res))
	assert.Equal(t, 1, instances.count())
}

// TestE2EPerPrincipalInstancesRouteServerRequests: the single-caller rule
// refuses a stdio or HTTP+SSE server's requests, and drops log messages of
// a streamable-HTTP server's standalone GET stream, while two clients'
// calls are in flight on it (TestE2ESingleCallerRuleOnStdioAndSSEServers,
// TestE2ELogMessagesOfAnHTTPServerReachTheirOwnCall). With
// an instance per principal, alice's and bob's calls are on instances of
// their own: while alice's call waits for her answer to its elicitation,
// bob's call has its sampling request and its log message reach bob.
func TestE2EPerPrincipalInstancesRouteServerRequests(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	sse := startOnFreePort(t, func(addr string) *exec.Cmd { return exec.Command(asker, "-sse", addr) })
	remote := startOnFreePort(t, func(addr string) *exec.Cmd { return exec.Command(asker, "-http", addr) })
	perPrincipal := InstancesConfig{Per: InstancesPerPrincipal}
	g, url, _, _ := askerServersGateway(t, InputRequestsConfig{},
		ServerConfig{Name: "sse", URL: "http://" + sse + "/", Transport: RemoteSSE, AllowPrivateNetwork: true, Instances: perPrincipal},
		ServerConfig{Name: "http", URL: "http://" + remote + "/mcp", AllowPrivateNetwork: true, Instances: perPrincipal},
		ServerConfig{Name: "stdio", Command: asker, Instances: perPrincipal})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var h hearing
	asked := make(chan string, 1)
	release := make(chan struct{})
	alice := h.listener(t, ctx, url, aliceToken, "alice", &mcp.ClientOptions{ElicitationHandler: heldElicitation(ctx, asked, release)})
	bob := h.listener(t, ctx, url, bobToken, "bob", &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "bob's", Role: "assistant",
				Content: &mcp.TextContent{Text: "bob answers " + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		}})

	for i, server := range []string{"stdio", "sse", "http"} {
		confirmed := confirmHeld(t, ctx, alice, server+"__confirm", "alice on "+server+"?", asked)

		// Alice's call is in flight on her instance: bob's reach him.
		res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: server + "__sample", Arguments: map[string]any{"prompt": "bob?"}})
		require.NoError(t, err)
		assert.Contains(t, text(t, res), "bob answers bob?")
		// On the streamable-HTTP server, the log message goes on the
		// session's standalone GET stream, which names no call.
		atOnce(t, ctx, server+"__note", map[string]*mcp.ClientSession{"bob": bob}, func(string) string { return "bob on " + server },
			nil, map[string]any{"aside": server == "http"})
		assert.Equal(t, "bob on "+server, h.await(t, "bob", i+1)[i])

		release <- struct{}{}
		assert.Equal(t, "accept ok=true", <-confirmed)
	}
	assert.Empty(t, h.of("alice"), "bob's log messages reach bob only")

	// A 2026-07-28 client of bob's is bob: its bridged call, which the
	// server asks for input, runs on bob's instance.
	modernBob := modernClient(t, ctx, url, bobToken, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}})
	res, err := modernBob.CallTool(ctx, &mcp.CallToolParams{Name: "stdio__confirm", Arguments: map[string]any{"question": "bob?"}})
	require.NoError(t, err)
	assert.Equal(t, "accept ok=true", text(t, res))
	for _, u := range g.upstreams {
		assert.Equal(t, 2, u.instances.count(), "server %q: alice's and bob's instances", u.cfg.Name)
	}
}

// TestInstancesConfig: the instances block as a config file gives it, and
// the problems a file can have there, each under its key.
func TestInstancesConfig(t *testing.T) {
	cfg, err := loadOneServer(t, "instances: {per: principal, max: 4, idle_timeout: 90s}")
	require.NoError(t, err)
	assert.Equal(t, InstancesConfig{Per: InstancesPerPrincipal, Max: 4, IdleTimeout: 90 * time.Second}, cfg.Servers[0].Instances)
	assert.Equal(t, InstancesConfig{Per: InstancesPerPrincipal, Max: DefaultMaxInstances, IdleTimeout: DefaultInstanceIdleTimeout},
		InstancesConfig{Per: InstancesPerPrincipal}.withDefaults())
	assert.False(t, InstancesConfig{}.withDefaults().perPrincipal(), "shared by default")

	for _, tc := range []struct {
		yaml, key, problem string
	}{
		{"instances: {per: session}", "servers[0].instances.per", `"session" is not an instances mode`},
		{"instances: {per: principal, max: -1}", "servers[0].instances.max", "negative (-1)"},
		{"instances: {per: principal, idle_timeout: -1s}", "servers[0].instances.idle_timeout", "negative (-1s)"},
		{"instances: {max: 3}", "servers[0].instances", "sets max or idle_timeout for a shared server"},
		{"instances: {idle_timeout: 5}", "servers[0].instances.idle_timeout", "not a duration"},
		{"instances: {pre: principal}", "servers[0].instances.pre", "unknown key"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := loadOneServer(t, tc.yaml)
			requireConfigError(t, err, tc.key, tc.problem)
		})
	}
}

// TestE2EPerPrincipalMemoryServers: the npm memory server keeps its graph
// in a file; per principal, each instance has its own, in its own private
// /tmp, so what alice stores bob does not read, and the other way round.
func TestE2EPerPrincipalMemoryServers(t *testing.T) {
	memCmd, memArgs := testenv.NodeCommand(t, "mcp-server-memory")
	g, _ := startGateway(t, &Config{Naming: NamingFirst, Servers: []ServerConfig{{
		Name: "memory", Command: memCmd, Args: memArgs, Tools: ToolFilter{Allow: []string{"*"}},
		Env:       map[string]string{"MEMORY_FILE_PATH": "/tmp/memory.jsonl"},
		Sandbox:   sandbox.Profile{Mode: sandbox.ModeRequire},
		Instances: InstancesConfig{Per: InstancesPerPrincipal},
	}}})
	ctx := context.Background()
	alice := policy.Principal{ID: "alice", AuthMethod: AuthAPIKey}
	bob := policy.Principal{ID: "bob", AuthMethod: AuthAPIKey}
	call := func(p policy.Principal, tool string, args map[string]any) string {
		t.Helper()
		res, err := g.CallTool(ctx, p, tool, args)
		require.NoError(t, err)
		require.False(t, res.IsError, text(t, res))
		return text(t, res)
	}
	store := func(p policy.Principal, observation string) {
		t.Helper()
		call(p, "create_entities", map[string]any{"entities": []any{
			map[string]any{"name": p.ID + "'s", "entityType": "note", "observations": []any{observation}},
		}})
	}
	store(alice, "alice's secret")
	store(bob, "bob's secret")
	aliceGraph, bobGraph := call(alice, "read_graph", nil), call(bob, "read_graph", nil)
	assert.Contains(t, aliceGraph, "alice's secret")
	assert.NotContains(t, aliceGraph, "bob's secret")
	assert.Contains(t, bobGraph, "bob's secret")
	assert.NotContains(t, bobGraph, "alice's secret")
}

// TestE2EPerPrincipalInstancesEndWithTheirServer: a principal's instance
// whose process was killed is replaced, whole (both eras' processes), on
// the principal's next call; when the listing instance exits, the server
// is restarted and every per-principal instance is stopped with the old
// one, to start afresh on the next call.
func TestE2EPerPrincipalInstancesEndWithTheirServer(t *testing.T) {
	sc := demoServer(t)
	sc.Instances = InstancesConfig{Per: InstancesPerPrincipal}
	sc.Restart = RestartConfig{Backoff: 50 * time.Millisecond}
	cfg := &Config{Servers: []ServerConfig{sc}}
	g, _ := startGateway(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice := policy.Principal{ID: "alice", AuthMethod: AuthAPIKey}
	echo := func(message string) {
		t.Helper()
		res, err := g.CallTool(ctx, alice, "demo__echo", map[string]any{"message": message})
		require.NoError(t, err)
		require.False(t, res.IsError, text(t, res))
		assert.Equal(t, message, text(t, res))
	}
	pids := func(u *upstream) []int {
		var out []int
		for _, l := range []*link{u.legacy, u.modern} {
			if l != nil && l.proc != nil {
				out = append(out, l.proc.Pid())
			}
		}
		return out
	}
	current := func() *upstream {
		g.mu.RLock()
		defer g.mu.RUnlock()
		require.Len(t, g.upstreams, 1)
		return g.upstreams[0]
	}
	aliceInstance := func() *upstream {
		t.Helper()
		all := current().instances.all()
		require.Len(t, all, 1)
		return all[0]
	}

	echo("first")
	killed := aliceInstance()
	first := pids(killed)
	require.Len(t, first, 2, "the demo server speaks both eras: two processes")
	require.NoError(t, syscall.Kill(first[0], syscall.SIGKILL))
	// A call sent before the gateway learns of the exit fails, as one
	// in flight does.
	require.Eventually(t, func() bool { return !killed.alive() }, 10*time.Second, 10*time.Millisecond)
	echo("second")
	second := pids(aliceInstance())
	assert.NotContains(t, second, first[0])
	assert.NotContains(t, second, first[1])
	testenv.RequireGone(t, first[1]) // the other era's process went with its instance

	primary := current()
	require.NoError(t, syscall.Kill(pids(primary)[0], syscall.SIGKILL))
	testenv.RequireGone(t, second...)
	require.Eventually(t, func() bool {
		g.mu.RLock()
		defer g.mu.RUnlock()
		return len(g.upstreams) == 1 && g.upstreams[0] != primary
	}, 30*time.Second, 20*time.Millisecond, "the server is restarted")
	echo("third")
	assert.Equal(t, 1, current().instances.count())
	assert.Equal(t, 2*2, serverProcesses(g, "mcp-warden demo-server"), "the listing instance and alice's")
}

// TestPerPrincipalInstanceThatFailsToStartIsForgotten: a start that fails
// after its request gave up waiting holds no room: with room for one
// instance, another principal's call starts one once it failed, and the
// principal whose start failed gets a fresh start, not the old error.
func TestPerPrincipalInstanceThatFailsToStartIsForgotten(t *testing.T) {
	// The command is a link: to the demo server for the listing instance,
	// then to a script that fails slowly, as a server that cannot reach
	// its registry does, then to the demo server again.
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	demo := testenv.BuildGo(t, "./cmd/mcp-warden")
	failing := filepath.Join(dir, "failing")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\nsleep 1\nexit 1\n"), 0o755))
	link := filepath.Join(dir, "server")
	relink := func(to string) {
		t.Helper()
		require.NoError(t, os.Remove(link))
		require.NoError(t, os.Symlink(to, link))
	}
	require.NoError(t, os.Symlink(demo, link))
	sc := demoServer(t)
	sc.Command = link
	sc.Instances = InstancesConfig{Per: InstancesPerPrincipal, Max: 1}
	g, _ := startGateway(t, &Config{Servers: []ServerConfig{sc}})
	instances := g.upstreams[0].instances
	relink(failing)
	alice := policy.Principal{ID: "alice", AuthMethod: AuthAPIKey}
	bob := policy.Principal{ID: "bob", AuthMethod: AuthAPIKey}

	quick, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	res, err := g.CallTool(quick, alice, "demo__echo", map[string]any{"message": "alice"})
	cancel()
	require.NoError(t, err)
	assert.True(t, res.IsError, "alice gave up waiting for her instance")
	require.Eventually(t, func() bool { return instances.count() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the failed start is forgotten")

	relink(demo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []policy.Principal{bob, alice} {
		res, err = g.CallTool(ctx, p, "demo__echo", map[string]any{"message": p.ID})
		require.NoError(t, err)
		require.False(t, res.IsError, text(t, res))
		assert.Equal(t, p.ID, text(t, res))
	}
}

func TestInstanceKeyIsThePrincipalPolicySees(t *testing.T) {
	assert.Equal(t, instanceKey(policy.Principal{ID: "anonymous", AuthMethod: AuthNone}), instanceKey(policy.Principal{ID: "anonymous"}),
		"an embedder's principal without a method is the configured principal")
	assert.NotEqual(t, instanceKey(policy.Principal{ID: "x", AuthMethod: AuthAPIKey}), instanceKey(policy.Principal{ID: "x", AuthMethod: AuthJWT}))
	assert.Equal(t, instanceKey(policy.Principal{ID: "x", AuthMethod: AuthJWT, Transport: "rest"}),
		instanceKey(policy.Principal{ID: "x", AuthMethod: AuthJWT, Transport: "streamable-http"}), "whatever the transport")
}

func TestSameConfinement(t *testing.T) {
	strong := policy.Confinement{ProcessGroup: true, PIDNamespace: true, Landlock: 5, Seccomp: true, Level: "strong"}
	again := strong
	again.Missing = []string{}
	assert.True(t, sameConfinement(strong, again))
	weaker := strong
	weaker.Landlock, weaker.Level, weaker.Missing = 0, "partial", []string{"landlock: not supported"}
	assert.False(t, sameConfinement(strong, weaker))
}

// TestE2EPerPrincipalInstancesOfADualEraServer: a stdio server that speaks
// both eras runs as two processes per instance. Two 2026-07-28 clients of
// two principals have their calls on their own instances' modern
// processes: while bob's call is held there, alice's log message reaches
// her (on one shared modern process it would be dropped, see
// TestE2EEachProcessOfADualEraStdioServerHasItsOwnCallers).
func TestE2EPerPrincipalInstancesOfADualEraServer(t *testing.T) {
	asker := testenv.BuildGo(t, "./testdata/servers/asker")
	g, url, _, _ := askerServersGateway(t, InputRequestsConfig{},
		ServerConfig{Name: "modern", Command: asker, Args: []string{"-modern"}, Instances: InstancesConfig{Per: InstancesPerPrincipal}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var h hearing
	alice := modernClient(t, ctx, url, aliceToken, &mcp.ClientOptions{LoggingMessageHandler: h.handler(t, "alice")})
	bob := modernClient(t, ctx, url, bobToken, &mcp.ClientOptions{LoggingMessageHandler: h.handler(t, "bob")})
	info := func(string) mcp.Meta { return mcp.Meta{mcp.MetaKeyLogLevel: "info"} }

	holdCtx, stopHold := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() {
		_, err := bob.CallTool(holdCtx, &mcp.CallToolParams{Name: "hold", Meta: info("bob"), Arguments: map[string]any{"text": "bob holds"}})
		held <- err
	}()
	assert.Equal(t, []string{"bob holds"}, h.await(t, "bob", 1))
	atOnce(t, ctx, "note", map[string]*mcp.ClientSession{"alice": alice}, func(string) string { return "alice while bob holds" }, info, nil)
	assert.Equal(t, []string{"alice while bob holds"}, h.await(t, "alice", 1))
	stopHold()
	require.Error(t, <-held)

	instances := g.upstreams[0].instances
	assert.Equal(t, 2, instances.count())
	for _, u := range instances.all() {
		require.NotNil(t, u.modern, "an instance speaks the eras the listing instance found")
		assert.NotSame(t, u.legacy.proc, u.modern.proc)
	}
	assert.Equal(t, []string{"bob holds"}, h.of("bob"))
}
