package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// timeout bounds every wait in these tests; generous for a loaded machine.
const timeout = 30 * time.Second

// forEachMode runs f with the sandbox init ("pidns") and without it
// ("direct", the fallback when namespaces or Init are unavailable).
func forEachMode(t *testing.T, f func(t *testing.T, pidns bool)) {
	t.Run("pidns", func(t *testing.T) { f(t, true) })
	t.Run("direct", func(t *testing.T) {
		sandbox.WithoutInit(t)
		f(t, false)
	})
}

// spawn starts spec with a fresh marker in its environment, checks the
// confinement matches the mode and registers the leak checks: Close, then no
// process carrying the marker and the started pid gone.
func spawn(t *testing.T, pidns bool, spec sandbox.Spec) (*sandbox.Process, string, string) {
	t.Helper()
	key, value := testenv.Marker(t)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.Env[key] = value
	if spec.Name == "" {
		spec.Name = t.Name()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := sandbox.Spawn(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		testenv.RequireNoProcess(t, key, value)
		testenv.RequireGone(t, p.Pid())
	})
	c := p.Confinement()
	if pidns && !c.PIDNamespace {
		if os.Geteuid() == 0 {
			t.Fatalf("running as root but no PID namespace: %+v", c)
		}
		t.Skipf("no PID namespace available to this user: %+v", c)
	}
	if !pidns && c.PIDNamespace {
		t.Fatalf("PID namespace without Init: %+v", c)
	}
	if !c.ProcessGroup || !c.ParentDeathSignal || c.EnvironmentInherited {
		t.Fatalf("confinement %+v", c)
	}
	return p, key, value
}

// sharedDir is a temporary directory a server may read and write: servers
// of a root gateway run as an unprivileged uid of their own, and
// t.TempDir is private to root.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func waitDone(t *testing.T, p *sandbox.Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		t.Fatalf("server still running after %v", timeout)
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read stdout: %v", err)
	}
	return string(b)
}

func TestRoundTripThroughCat(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, _, _ := spawn(t, pidns, sandbox.Spec{Command: "cat"})
		out := bufio.NewReader(p.Stdout())
		for _, msg := range []string{`{"jsonrpc":"2.0","id":1}`, "second line"} {
			if _, err := fmt.Fprintln(p.Stdin(), msg); err != nil {
				t.Fatal(err)
			}
			got, err := out.ReadString('\n')
			if err != nil || got != msg+"\n" {
				t.Fatalf("read %q, %v; want %q", got, err, msg)
			}
		}
	})
}

// The server sees exactly the fixed base plus what was declared: no host
// variable, not even a loader variable exported by the gateway's parent.
func TestEnvironmentIsExactlyBasePlusDeclared(t *testing.T) {
	t.Setenv("MCPW_HOST_ONLY_SECRET", "host-value")
	t.Setenv("LD_PRELOAD", "/nonexistent/mcpw-test.so")
	t.Setenv("NODE_OPTIONS", "--require=/nonexistent/mcpw-test.js")
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, key, value := spawn(t, pidns, sandbox.Spec{
			Command: "env",
			Env:     map[string]string{"DECLARED": "a b=c", "HOME": "/srv/home"},
		})
		got := strings.Split(strings.TrimSuffix(readAll(t, p.Stdout()), "\n"), "\n")
		slices.Sort(got)
		want := []string{
			"DECLARED=a b=c",
			"HOME=/srv/home",
			"LANG=C.UTF-8",
			key + "=" + value,
			"PATH=/usr/local/bin:/usr/bin:/bin",
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("server environment:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDeclaredDangerousVariablesAreRefused(t *testing.T) {
	for _, kv := range [][2]string{
		{"LD_PRELOAD", "/tmp/x.so"},
		{"LD_LIBRARY_PATH", "/tmp"},
		{"LD_AUDIT", "/tmp/x.so"},
		{"NODE_OPTIONS", "--require=/tmp/x.js"},
		{"PYTHONPATH", "/tmp"},
		{"GIT_SSH_COMMAND", "/tmp/x"},
		{"npm_config_registry", "https://example.test/tmp"},
		{"BAD=KEY", "/tmp"},
		{"", "/tmp"},
		{"NUL\x00KEY", "/tmp"},
		{"NUL_VALUE", "/tmp\x00b"},
		{"FUNC", "() { :; }; /tmp/x"},
	} {
		key, value := kv[0], kv[1]
		_, err := sandbox.Spawn(context.Background(), sandbox.Spec{Name: "srv", Command: "true", Env: map[string]string{key: value}})
		if err == nil || !strings.Contains(err.Error(), `spawn "srv"`) || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
			t.Errorf("env %q: err = %v; want a refusal naming server and key", key, err)
		}
		if strings.Contains(fmt.Sprint(err), "/tmp") {
			t.Errorf("error quotes the value (which may be a secret): %v", err)
		}
	}
}

func TestCloseIsIdempotentAndConcurrent(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, _, _ := spawn(t, pidns, sandbox.Spec{Command: "cat"})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := p.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				select {
				case <-p.Done():
				default:
					t.Error("Close returned before the server was reaped")
				}
			})
		}
		wg.Wait()
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// Closing stdin is enough for a well-behaved server: it exits by itself with
// status 0 (a signal would show in Wait) and every byte it wrote is read.
func TestStdinCloseEndsWellBehavedServer(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, _, _ := spawn(t, pidns, sandbox.Spec{Command: "cat", StopGrace: time.Hour})
		if _, err := io.WriteString(p.Stdin(), "last words\n"); err != nil {
			t.Fatal(err)
		}
		if err := p.Stdin().Close(); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, p.Stdout()); got != "last words\n" {
			t.Fatalf("stdout %q", got)
		}
		waitDone(t, p)
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait: %v; want a clean exit", err)
		}
	})
}

// A tree that ignores SIGTERM and stdin is gone after Close, including (with
// a PID namespace) a setsid double-fork escapee outside the process group.
func TestCloseKillsTreeIgnoringTerm(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		args := []string{"-c", treeScript, "sh"}
		sleeps := []string{"sleep 1001", "sleep 1002"}
		if pidns {
			args = append(args, "escape")
			sleeps = append(sleeps, "sleep 1003")
		}
		p, key, value := spawn(t, pidns, sandbox.Spec{Command: "sh", Args: args, StopGrace: 200 * time.Millisecond})
		procs := testenv.WaitProcesses(t, key, value, sleeps...)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		var ee *sandbox.ExitError
		if err := p.Wait(); !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL {
			t.Errorf("Wait = %v; want killed by SIGKILL after the ignored SIGTERM", err)
		}
		pids := []int{p.Pid()}
		for _, pr := range procs {
			pids = append(pids, pr.Pid)
		}
		testenv.RequireGone(t, pids...)
		testenv.RequireNoProcess(t, key, value)
	})
}

// A server that ignores stdin but not SIGTERM ends at the SIGTERM step of
// Close. StopGrace is long enough for a loaded machine to act on SIGTERM.
func TestCloseTermReachesTree(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, key, value := spawn(t, pidns, sandbox.Spec{
			Command:   "sh",
			Args:      []string{"-c", "sleep 1001 & sh -c 'sleep 1002' & wait"},
			StopGrace: 5 * time.Second,
		})
		testenv.WaitProcesses(t, key, value, "sleep 1001", "sleep 1002")
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		var ee *sandbox.ExitError
		if err := p.Wait(); !errors.As(err, &ee) || ee.Signal != syscall.SIGTERM {
			t.Errorf("Wait = %v; want ended by SIGTERM", err)
		}
		testenv.RequireNoProcess(t, key, value)
	})
}

// recordTerm runs as every process of the tree below: on SIGTERM it writes
// $1/$2 and exits 0.
const recordTerm = `trap 'echo term > "$1/$2"; exit 0' TERM
sleep "$3" &
wait`

// The init forwards a stop signal to every process of the namespace, setsid
// escapees included, and waits for all of them to finish their shutdown
// before exiting with the server's status.
func TestInitForwardsTermToWholeNamespace(t *testing.T) {
	dir := sharedDir(t)
	rec := dir + "/rec.sh"
	if err := os.WriteFile(rec, []byte(recordTerm), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := `sh "$0" "$1" child 1001 &
sh -c 'sh "$0" "$1" grandchild 1002 & wait' "$0" "$1" &
setsid sh -c 'sh "$0" "$1" escapee 1003 &' "$0" "$1"
trap 'echo term > "$1/server"; wait; exit 0' TERM
sleep 1000 &
wait`
	p, key, value := spawn(t, true, sandbox.Spec{Command: "sh", Args: []string{"-c", tree, rec, dir}, StopGrace: time.Hour,
		Profile: sandbox.Profile{ReadWrite: []string{dir}}})
	procs := testenv.WaitProcesses(t, key, value, "sleep 1000", "sleep 1001", "sleep 1002", "sleep 1003")
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil { // the init only, not the group
		t.Fatal(err)
	}
	waitDone(t, p)
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait = %v; want the server's own clean exit", err)
	}
	for _, name := range []string{"server", "child", "grandchild", "escapee"} {
		if _, err := os.Stat(dir + "/" + name); err != nil {
			t.Errorf("%s did not get SIGTERM: %v", name, err)
		}
	}
	pids := []int{p.Pid()}
	for _, pr := range procs {
		pids = append(pids, pr.Pid)
	}
	testenv.RequireGone(t, pids...)
}

// After a stop signal, an escapee that ignores it delays the init's exit by
// at most StopGrace once the server has gone; then the kernel kills it.
func TestInitDrainIsBounded(t *testing.T) {
	tree := `(trap "" TERM; setsid sh -c 'sleep 1003 &')
trap 'exit 0' TERM
sleep 1000 &
wait`
	p, key, value := spawn(t, true, sandbox.Spec{Command: "sh", Args: []string{"-c", tree}, StopGrace: 300 * time.Millisecond})
	procs := testenv.WaitProcesses(t, key, value, "sleep 1000", "sleep 1003")
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil { // the init only: no SIGKILL follows
		t.Fatal(err)
	}
	waitDone(t, p)
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait = %v; want the server's own clean exit", err)
	}
	pids := []int{p.Pid()}
	for _, pr := range procs {
		pids = append(pids, pr.Pid)
	}
	testenv.RequireGone(t, pids...)
}

func TestServerExitingAtOnce(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		p, _, _ := spawn(t, pidns, sandbox.Spec{Command: "true", StopGrace: time.Hour})
		waitDone(t, p)
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		start := time.Now()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > timeout {
			t.Fatalf("Close of an exited server took %v", d)
		}

		q, _, _ := spawn(t, pidns, sandbox.Spec{Command: "sh", Args: []string{"-c", "exit 3"}})
		waitDone(t, q)
		var ee *sandbox.ExitError
		if err := q.Wait(); !errors.As(err, &ee) || ee.Code != 3 || ee.Signal != 0 {
			t.Fatalf("Wait = %v; want exit status 3", err)
		}
	})
}

func TestSpawnFailuresNameServerAndCommand(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		key, value := testenv.Marker(t)
		for _, spec := range []sandbox.Spec{
			{Command: "mcpw-no-such-command"},
			{Command: "/nonexistent/mcpw-no-such-command"},
			{Command: "true", Dir: "/nonexistent/mcpw-dir"},
			{Command: "/etc/passwd"}, // not executable
		} {
			spec.Name = "srv"
			spec.Env = map[string]string{key: value}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			p, err := sandbox.Spawn(ctx, spec)
			cancel()
			if err == nil {
				p.Close()
				t.Errorf("Spawn(%q, dir %q) succeeded", spec.Command, spec.Dir)
				continue
			}
			msg := err.Error()
			if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(msg, `spawn "srv"`) ||
				!strings.Contains(msg, spec.Command) && !strings.Contains(msg, spec.Dir) {
				t.Errorf("Spawn(%q, dir %q): %v; want an error naming the server and the command", spec.Command, spec.Dir, err)
			}
			t.Logf("%v", err)
		}
		testenv.RequireNoProcess(t, key, value)
	})
}

func TestSpawnHonoursCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "srv", Command: "cat"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Spawn with a cancelled context: %v", err)
	}
}

func TestDirAndArgs(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		dir := t.TempDir()
		p, _, _ := spawn(t, pidns, sandbox.Spec{
			Command: "sh",
			Args:    []string{"-c", `pwd; printf '%s|' "$@"`, "sh", "a b", "$HOME"},
			Dir:     dir,
		})
		if got, want := readAll(t, p.Stdout()), dir+"\na b|$HOME|"; got != want {
			t.Fatalf("stdout %q, want %q", got, want)
		}
	})
}

// As root the PID namespace must be achieved: the server's NSpid line lists
// a host pid and a different pid inside the namespace (PID 1 is the init).
func TestPIDNamespaceAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root; unprivileged runs try a user namespace instead")
	}
	p, _, _ := spawn(t, true, sandbox.Spec{Command: "sh", Args: []string{"-c", "echo $$; exec grep NSpid /proc/self/status"}})
	if c := p.Confinement(); c.Level != sandbox.LevelStrong || !c.PIDNamespace || !c.UserNamespace || len(c.Missing) > 0 {
		t.Fatalf("Confinement() = %+v, want strong", c)
	}
	// The fresh /proc belongs to the server's PID namespace: the server's
	// NSpid line holds its pid there only, which is not 1 (the init).
	out := readAll(t, p.Stdout())
	var inner, nsPid int
	if _, err := fmt.Sscanf(out, "%d\nNSpid:\t%d\n", &inner, &nsPid); err != nil || nsPid != inner || inner <= 1 {
		t.Fatalf("server output %q (%v); want its pid inside a PID namespace", out, err)
	}
}

// When the gateway is SIGKILLed, every process of the server's tree dies
// with it, the setsid escapee included.
func TestParentKilled(t *testing.T) { testParentKilled(t) }

func testParentKilled(t *testing.T) {
	key, value := testenv.Marker(t)
	killParent(t, key, value, false)
}

// The same with a Pool: the server it served and the init it holds for
// the next one both die with the gateway.
func TestParentKilledWithPool(t *testing.T) {
	key, value := testenv.Marker(t)
	killParent(t, key, value, true)
}

// Twenty times over: a gateway spawns a tree with a setsid escapee and is
// SIGKILLed; each time nothing of the tree remains, and every cgroup the
// dead gateways left is empty. Every other gateway spawns through a Pool
// that holds an init for the next server.
func TestNoLeakAfterRepeatedParentSIGKILL(t *testing.T) {
	key, value := testenv.Marker(t)
	var parents []int
	for i := range 20 {
		parents = append(parents, killParent(t, key, value, i%2 == 1))
		if t.Failed() || t.Skipped() {
			return
		}
	}
	testenv.RequireNoProcess(t, key, value)
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	_, path, _ := strings.Cut(strings.TrimSpace(string(own)), "0::")
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		for _, pid := range parents {
			dir := filepath.Join(root, path, fmt.Sprintf("mcp-warden-%d", pid))
			events, _ := filepath.Glob(filepath.Join(dir, "*", "cgroup.events"))
			for _, e := range events {
				if b, _ := os.ReadFile(e); !strings.Contains(string(b), "populated 0") {
					t.Errorf("%s: %s", e, b)
				}
				_ = os.Remove(filepath.Dir(e))
			}
			_ = os.Remove(dir)
		}
	}
}

// killParent starts a gateway (this binary in the "parent" role, with a
// Pool if pooled) that spawns a tree marked key=value, SIGKILLs it once the
// tree runs, proves the tree (and the pool's waiting init) gone and returns
// the gateway's pid.
func killParent(t *testing.T, key, value string, pooled bool) int {
	t.Helper()
	parent := exec.Command(os.Args[0], "-test.run=^$")
	role := "parent"
	if pooled {
		role = "parent-pool"
	}
	parent.Env = append(os.Environ(), roleEnv+"="+role, key+"="+value)
	parent.Stderr = os.Stderr
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		_ = parent.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("parent said %q: %v", line, err)
	}
	var pid, idle int
	var pidns bool
	if _, err := fmt.Sscanf(line, "pid %d pidns %t idle %d", &pid, &pidns, &idle); err != nil {
		t.Fatalf("parent said %q: %v", line, err)
	}
	if !pidns {
		if os.Geteuid() == 0 {
			t.Fatal("running as root but no PID namespace")
		}
		t.Skip("no PID namespace: Pdeathsig alone reaches only the direct child")
	}
	procs := testenv.WaitProcesses(t, key, value, "sleep 1001", "sleep 1002", "sleep 1003")
	pids := []int{pid}
	if pooled {
		if idle == 0 || idle == pid {
			t.Fatalf("parent said %q: no waiting init besides the server's", line)
		}
		pids = append(pids, idle)
	}
	for _, pr := range procs {
		pids = append(pids, pr.Pid)
	}

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	testenv.RequireGone(t, pids...)
	testenv.RequireNoProcess(t, key, value)
	return parent.Process.Pid
}

// Servers started at the same time do not inherit each other's pipes: each
// sees EOF on stdin and its reader sees EOF as soon as it exits.
func TestConcurrentSpawns(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		key, value := testenv.Marker(t)
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "cat", Command: "cat", Env: map[string]string{key: value}})
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
				if got := p.Confinement().PIDNamespace; got != pidns && os.Geteuid() == 0 {
					t.Errorf("PIDNamespace = %v", got)
				}
				msg := fmt.Sprintf("server %d\n", i)
				if _, err := io.WriteString(p.Stdin(), msg); err != nil {
					t.Error(err)
				}
				p.Stdin().Close()
				if got, err := io.ReadAll(p.Stdout()); err != nil || string(got) != msg {
					t.Errorf("stdout %q, %v; want %q", got, err, msg)
				}
				if err := p.Wait(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		testenv.RequireNoProcess(t, key, value)
	})
}

// Stderr reaches a plain io.Writer, and the copying goroutine ends even when
// a background process of the server still holds the pipe (goleak checks).
func TestStderrToWriter(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidns bool) {
		var stderr testenv.Buffer
		p, _, _ := spawn(t, pidns, sandbox.Spec{
			Command: "sh",
			Args:    []string{"-c", "echo diagnostics >&2; sleep 1001 &"},
			Stderr:  &stderr,
		})
		waitDone(t, p)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if got := stderr.String(); got != "diagnostics\n" {
			t.Fatalf("stderr %q", got)
		}
	})
}

// A file descriptor the gateway inherited without close-on-exec (a leaked
// socket, say) never reaches a server.
func TestInheritedFDsDoNotReachServer(t *testing.T) {
	for _, mode := range []string{"pidns", "direct"} {
		t.Run(mode, func(t *testing.T) {
			leaked, err := os.Create(t.TempDir() + "/leaked-into-gateway")
			if err != nil {
				t.Fatal(err)
			}
			defer leaked.Close()
			gw := exec.Command(os.Args[0], "-test.run=^$")
			gw.Env = append(os.Environ(), roleEnv+"=fds", "MCPW_SANDBOX_TEST_MODE="+mode, "GORACE=atexit_sleep_ms=0")
			gw.ExtraFiles = []*os.File{nil, nil, leaked} // fd 5, inherited without close-on-exec
			gw.Stderr = os.Stderr
			out, err := gw.Output()
			if err != nil {
				t.Fatalf("gateway role: %v", err)
			}
			if !strings.Contains(string(out), " 0 -> ") || strings.Contains(string(out), "leaked-into-gateway") {
				t.Fatalf("server's open files:\n%s", out)
			}
		})
	}
}
