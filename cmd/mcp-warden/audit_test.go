package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

func TestAuditVerifyCommand(t *testing.T) {
	bin := testenv.BuildGo(t, "./cmd/mcp-warden")
	path := filepath.Join(t.TempDir(), "decisions.log")
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), nil)
	require.NoError(t, err)
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{})
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	for i := range 4 {
		d.Decide(context.Background(), policy.Input{Action: policy.ActionToolsCall,
			Principal: policy.Principal{ID: fmt.Sprint("p", i)}, Time: policy.Timestamp(time.Now())})
	}
	require.NoError(t, l.Close())

	out, err := exec.Command(bin, "audit", "verify", path).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "ok: 4 records in 1 files")
	head := regexp.MustCompile(`last hash ([0-9a-f]{64})`).FindStringSubmatch(string(out))
	require.NotNil(t, head, string(out))

	// The last record cut: the chain has no gap, but it no longer holds
	// the head an earlier verification printed.
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	cut := filepath.Join(t.TempDir(), "cut.log")
	require.NoError(t, os.WriteFile(cut, bytes.Join(lines[:3], nil), 0o600))
	out, err = exec.Command(bin, "audit", "verify", cut).CombinedOutput()
	require.NoError(t, err, "without a kept hash the cut is invisible: %s", out)
	out, err = exec.Command(bin, "audit", "verify", "--includes", head[1], cut).CombinedOutput()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), cut+":4: truncated: the chain ends before record "+head[1])
	out, err = exec.Command(bin, "audit", "verify", "--includes", head[1], path).CombinedOutput()
	require.NoError(t, err, string(out))

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, bytes.Replace(b, []byte(`"id":"p2"`), []byte(`"id":"p9"`), 1), 0o600))
	out, err = exec.Command(bin, "audit", "verify", path).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, string(out))
	assert.NotEqual(t, 0, exit.ExitCode())
	assert.Contains(t, string(out), path+":3: edited")
}

// A decision log written by a real gateway over stdio replays the same
// with its configuration, and with a changed allow list names the
// decisions that would now differ.
func TestE2EAuditReplayCommand(t *testing.T) {
	bin := testenv.BuildGo(t, "./cmd/mcp-warden")
	cfgPath, key, value := writeConfig(t, demoServerYAML(t), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: exec.Command(bin, "serve", "--config", cfgPath, "--principal", "bob")}, nil)
	require.NoError(t, err)
	_, err = cs.ListTools(ctx, nil) // line 1
	require.NoError(t, err)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"message": "hi"}}) // line 2
	require.NoError(t, err)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 1, "b": 2}}) // line 3
	require.NoError(t, err)
	require.NoError(t, cs.Close())
	testenv.RequireNoProcess(t, key, value)
	logPath := filepath.Join(filepath.Dir(cfgPath), "decisions.log")

	out, err := exec.Command(bin, "audit", "replay", "--config", cfgPath, logPath).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "chain ok: 3 records in 1 files\n6 decisions of 3 events replayed: 6 same, 0 differ, 0 not replayable\n", string(out))

	// echo blocked too: its list item and its call differ.
	cfg, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfgPath, bytes.Replace(cfg, []byte("block: [reset_notes]"), []byte("block: [reset_notes, echo]"), 1), 0o600))
	out, err = exec.Command(bin, "audit", "replay", "--config", cfgPath, logPath).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 5, string(out))
	assert.Regexp(t, `^`+regexp.QuoteMeta(logPath)+`:1: decision \S+ tools/list tool demo__echo \(item \d of 4\) principal "bob": logged \{"allow":true,"reason":"[^"]+"\}, replayed \{"allow":false,"reason":".+ is not exposed by data.warden.servers"\}$`, lines[1])
	assert.Regexp(t, `^`+regexp.QuoteMeta(logPath)+`:2: decision \S+ tools/call tool demo__echo principal "bob": logged \{"allow":true,.*\}, replayed \{"allow":false,"hidden":true,"reason":"unknown tool"\}$`, lines[2])
	assert.Equal(t, "6 decisions of 3 events replayed: 4 same, 2 differ, 0 not replayable", lines[3])
	assert.Equal(t, "mcp-warden: replay: 2 decisions differ", lines[4])

	// A changed record is found before anything is replayed.
	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(logPath, bytes.Replace(log, []byte(`"id":"bob"`), []byte(`"id":"eve"`), 1), 0o600))
	out, err = exec.Command(bin, "audit", "replay", "--config", cfgPath, logPath).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), logPath+":1: edited")
	assert.NotContains(t, string(out), "replayed")
}

// The demo policy reads the arguments of read_note, and the demo's mask
// erases the names of private notes: such a call is not replayable, the
// rest replay the same; --strict fails on it.
func TestE2EAuditReplayDemo(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	_, url := startServe(t, "--demo", "--listen", "127.0.0.1:0", "--decision-log", logPath)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.NoError(t, err)
	defer cs.Close()
	for _, name := range []string{"private/diary", "todo"} {
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": name}})
		require.NoError(t, err)
	}

	bin := testenv.BuildGo(t, "./cmd/mcp-warden")
	out, err := exec.Command(bin, "audit", "replay", "--demo", logPath).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), logPath+`:1: decision `)
	assert.Contains(t, string(out), ` tools/call tool demo__read_note principal "demo-user": not replayable: input/arguments/name erased by the log mask and read by the policy`)
	assert.True(t, strings.HasSuffix(string(out), "2 decisions of 2 events replayed: 1 same, 0 differ, 1 not replayable\n"), string(out))
	out, err = exec.Command(bin, "audit", "replay", "--demo", "--strict", logPath).CombinedOutput()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "1 decisions are not replayable (--strict)")

	out, err = exec.Command(bin, "audit", "replay", logPath).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--config FILE, --agent NAME or --demo")
}
