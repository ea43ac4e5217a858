package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/sandbox"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// roleEnv selects a re-exec role of the test binary (see TestParentKilled).
const roleEnv = "MCPW_SANDBOX_TEST_ROLE"

func TestMain(m *testing.M) {
	sandbox.Init()
	switch os.Getenv(roleEnv) {
	case "parent":
		os.Exit(runParent(false))
	case "parent-pool":
		os.Exit(runParent(true))
	case "fds":
		os.Exit(runListFDs())
	}
	goleak.VerifyTestMain(m)
}

// runParent plays a gateway that spawns a tree (through a Pool if pooled),
// prints the pid Spawn started and the pid of the init the pool then holds
// (0 without a pool), and waits to be SIGKILLed by TestParentKilled.
func runParent(pooled bool) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spawn := sandbox.Spawn
	var pl *sandbox.Pool
	if pooled {
		pl = sandbox.NewPool()
		if _, err := sandbox.AwaitWarm(pl, sandbox.NetworkNone); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		spawn = pl.Spawn
	}
	p, err := spawn(ctx, sandbox.Spec{
		Name:    "tree",
		Command: "sh",
		Args:    []string{"-c", treeScript, "sh", "escape"},
		Env:     map[string]string{testenv.MarkerKey: os.Getenv(testenv.MarkerKey)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	idle := 0
	if pooled {
		if idle, err = sandbox.AwaitWarm(pl, sandbox.NetworkNone); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("pid %d pidns %v idle %d\n", p.Pid(), p.Confinement().PIDNamespace, idle)
	time.Sleep(5 * time.Minute) // killed long before
	return 1
}

// runListFDs spawns, in the mode named by MCPW_SANDBOX_TEST_MODE, a server
// that lists its open files, and copies the list to stdout. The test binary
// was started with an extra inherited fd (see TestInheritedFDsDoNotReachServer).
func runListFDs() int {
	if os.Getenv("MCPW_SANDBOX_TEST_MODE") == "direct" {
		sandbox.DisableInit()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{Name: "fds", Command: "ls", Args: []string{"-l", "/proc/self/fd/"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.Close()
	if _, err := io.Copy(os.Stdout, p.Stdout()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// treeScript starts a tree in which every process ignores SIGTERM: a child
// (sleep 1001), a grandchild (sleep 1002) and, with "escape" as $1, a
// setsid double-fork escapee (sleep 1003) that leaves the process group.
const treeScript = `trap "" TERM
sleep 1001 &
sh -c 'sleep 1002 & wait' &
if [ "$1" = escape ]; then setsid sh -c 'sleep 1003 &'; fi
echo ready
wait`
