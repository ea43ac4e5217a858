package testenv

// Process-leak checks. goleak sees goroutines, not processes: these helpers
// tag a process tree with a unique environment variable and scan /proc for
// it. Linux only. Reading other users' /proc/<pid>/environ needs root; as
// another user only that user's processes are seen.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// MarkerKey is the name of the variable Marker returns.
const MarkerKey = "MCPW_TEST_MARK"

// Timeout is how long the Require and Wait helpers poll before giving up;
// generous, for loaded CI machines.
const Timeout = 10 * time.Second

const pollInterval = 20 * time.Millisecond

var markers atomic.Uint64

// Marker returns an environment variable unique to this call (test name, pid,
// time, counter). Declare it in the server's environment: every process of
// the tree inherits it, so RequireNoProcess can find survivors. A process
// that clears its environment (env -i) escapes the scan.
func Marker(t testing.TB) (key, value string) {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if r <= ' ' || r == '=' {
			return '_'
		}
		return r
	}, t.Name())
	return MarkerKey, fmt.Sprintf("%s-%d-%d-%d", name, os.Getpid(), time.Now().UnixNano(), markers.Add(1))
}

// Proc is a live process seen in /proc.
type Proc struct {
	Pid     int
	Argv    []string
	Cmdline string // Argv joined by spaces
}

func (p Proc) String() string { return fmt.Sprintf("%d (%s)", p.Pid, p.Cmdline) }

// runs reports whether p runs command: its command line, with argv[0]
// shortened to its base name, equals command or starts with it and a space.
// So "sleep 1001" matches "/usr/bin/sleep 1001" but not a shell whose script
// merely mentions "sleep 1001", and "stubborn" matches "/x/stubborn -child".
func (p Proc) runs(command string) bool {
	if len(p.Argv) == 0 {
		return false
	}
	short := strings.Join(append([]string{filepath.Base(p.Argv[0])}, p.Argv[1:]...), " ")
	return short == command || strings.HasPrefix(short, command+" ")
}

// Processes returns the live processes, other than the caller, whose
// environment holds key=value. Zombies have no environment and are skipped.
func Processes(key, value string) []Proc {
	want := []byte(key + "=" + value)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				argv := readArgv(pid)
				out = append(out, Proc{Pid: pid, Argv: argv, Cmdline: strings.Join(argv, " ")})
				break
			}
		}
	}
	return out
}

// WaitProcesses polls until each of commands is run by a distinct process
// carrying key=value (see Proc.runs for the match: base name of argv[0] and
// leading arguments, e.g. "sleep 1001"; listing a command twice asks for two
// processes), and returns all processes carrying the marker. It fails the
// test after Timeout.
func WaitProcesses(t testing.TB, key, value string, commands ...string) []Proc {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		procs := Processes(key, value)
		missing := unmatched(procs, commands)
		if len(missing) == 0 {
			return procs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v no process with %s=%s runs %q; found %v", Timeout, key, value, missing, procs)
		}
		time.Sleep(pollInterval)
	}
}

// unmatched pairs commands with distinct processes, longest command first
// (a process that runs "a b" also runs "a"), and returns those left over.
func unmatched(procs []Proc, commands []string) []string {
	commands = slices.Clone(commands)
	slices.SortStableFunc(commands, func(a, b string) int { return len(b) - len(a) })
	used := make([]bool, len(procs))
	var missing []string
	for _, c := range commands {
		found := false
		for i, p := range procs {
			if !used[i] && p.runs(c) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			missing = append(missing, c)
		}
	}
	return missing
}

// RequireNoProcess fails the test if a process carrying key=value is still
// alive after polling for up to Timeout. Survivors are SIGKILLed before the
// failure is reported, so one leak does not spill into other tests.
func RequireNoProcess(t testing.TB, key, value string) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		procs := Processes(key, value)
		if len(procs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range procs {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			t.Errorf("processes with %s=%s still alive after %v (now killed): %v", key, value, Timeout, procs)
			return
		}
		time.Sleep(pollInterval)
	}
}

// RequireGone fails the test if any of pids still runs after polling for up
// to Timeout; a zombie counts as gone (it runs nothing, only its parent's
// wait is missing). Survivors are SIGKILLed before the failure is reported.
// Pids are not reused within a test's few seconds on a normal pid_max.
func RequireGone(t testing.TB, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		var alive []Proc
		for _, pid := range pids {
			if running(pid) {
				argv := readArgv(pid)
				alive = append(alive, Proc{Pid: pid, Argv: argv, Cmdline: strings.Join(argv, " ")})
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range alive {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			t.Errorf("processes still alive after %v (now killed): %v", Timeout, alive)
			return
		}
		time.Sleep(pollInterval)
	}
}

// running reports whether pid exists and is not a zombie. The state is the
// first field after the last ')' of /proc/<pid>/stat (comm may hold ')').
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

func readArgv(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
