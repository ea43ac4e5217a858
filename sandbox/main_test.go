package sandbox_test

import (
	"context"
	"fmt"
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
	if os.Getenv(roleEnv) == "parent" {
		os.Exit(runParent())
	}
	goleak.VerifyTestMain(m)
}

// runParent plays a gateway that spawns a tree, prints the pid Spawn
// started, and waits to be SIGKILLed by TestParentKilled.
func runParent() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{
		Name:    "tree",
		Command: "sh",
		Args:    []string{"-c", treeScript, "sh", "escape"},
		Env:     map[string]string{testenv.MarkerKey: os.Getenv(testenv.MarkerKey)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("pid %d pidns %v\n", p.Pid(), p.Confinement().PIDNamespace)
	time.Sleep(5 * time.Minute) // killed long before
	return 1
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
