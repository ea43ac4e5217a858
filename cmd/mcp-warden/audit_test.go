package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

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
