package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// TestE2EStdioWaitsHoldNoThreadInRead: while `serve --stdio` and its demo
// servers wait for their client's next message, none of them has a thread
// blocked in read(2) on standard input, and the gateway has none blocked in
// waitid(2) for a server's exit. Such a thread is what hung calls
// under load: a garbage-collector pause that began as the thread entered
// the read waited for the read to return, that is for the client's next
// message, while the client waited for its answer (RATIONALE.md, "Why
// standard input is read through the poller"). The state is checked
// directly, in /proc, rather than by waiting for the race.
func TestE2EStdioWaitsHoldNoThreadInRead(t *testing.T) {
	cfgPath, key, value := writeConfig(t, demoServerYAML(t), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(testenv.BuildGo(t, "./cmd/mcp-warden"), "serve", "--config", cfgPath, "--stdio")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, cs.Close())
		testenv.RequireNoProcess(t, key, value)
	}()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"message": "idle next"}})
	require.NoError(t, err)
	require.False(t, res.IsError)

	pids := map[int]string{cmd.Process.Pid: "mcp-warden serve --stdio"}
	for _, p := range testenv.Processes(key, value) {
		if strings.Contains(p.Cmdline, "demo-server") {
			pids[p.Pid] = "upstream " + p.Cmdline
		}
	}
	require.Len(t, pids, 3, "the gateway and the demo server of each era: %v", pids)

	// Idle, every process settles where it waits for input; a blocking
	// read of stdin stays there for good. Settled means no such thread in
	// several samples in a row.
	deadline := time.Now().Add(testenv.Timeout)
	for quiet := 0; quiet < 20; {
		if in := threadsWaitingInSyscalls(t, pids); len(in) > 0 {
			quiet = 0
			if time.Now().After(deadline) {
				t.Fatalf("after %v idle, threads still blocked in read(2) on stdin or in waitid(2): %s", testenv.Timeout, strings.Join(in, "; "))
			}
		} else {
			quiet++
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsWaitingInSyscalls lists the threads of pids that are in read(2) on
// fd 0 or in waitid(2), from /proc/<pid>/task/<tid>/syscall ("nr arg0 …",
// or "running").
func threadsWaitingInSyscalls(t *testing.T, pids map[int]string) []string {
	var out []string
	for pid, name := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		require.NoError(t, err)
		require.NotEmpty(t, tasks, "%s (%d) is gone", name, pid)
		for _, path := range tasks {
			data, err := os.ReadFile(path)
			if err != nil {
				continue // the thread ended
			}
			f := strings.Fields(string(data))
			switch {
			case len(f) >= 2 && f[0] == strconv.Itoa(syscall.SYS_READ) && f[1] == "0x0":
				out = append(out, fmt.Sprintf("%s (%d), thread %s in read(2) on stdin", name, pid, filepath.Base(filepath.Dir(path))))
			case len(f) >= 1 && f[0] == strconv.Itoa(syscall.SYS_WAITID):
				out = append(out, fmt.Sprintf("%s (%d), thread %s in waitid(2)", name, pid, filepath.Base(filepath.Dir(path))))
			}
		}
	}
	return out
}
