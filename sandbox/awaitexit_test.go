package sandbox_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

// TestAwaitExitReturnsForAnExitBeforeOrAfter: waiting for a process's exit
// on its pidfd returns whether the process exited before the wait began
// (its exit is asked of the kernel, since the poller's readiness is reset
// when the wait starts) or while it waits, and leaves the child for
// cmd.Wait to reap.
func TestAwaitExitReturnsForAnExitBeforeOrAfter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		exited bool // wait until the child is a zombie before waiting
	}{
		{"exited before", []string{"true"}, true},
		{"exits while waited for", []string{"sleep", "0.2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfd := -1
			cmd := exec.Command(tc.args[0], tc.args[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{PidFD: &pidfd}
			require.NoError(t, cmd.Start())
			require.GreaterOrEqual(t, pidfd, 0, "the kernel gave a pidfd")
			if tc.exited {
				require.Eventually(t, func() bool { return zombie(cmd.Process.Pid) }, 10*time.Second, time.Millisecond)
			}
			done := make(chan struct{})
			go func() { sandbox.AwaitExit(pidfd); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatal("awaitExit did not return after the process exited")
			}
			require.True(t, zombie(cmd.Process.Pid), "the child is left for cmd.Wait to reap")
			require.NoError(t, cmd.Wait())
		})
	}
}

// zombie tells whether pid has exited and not been reaped.
func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
