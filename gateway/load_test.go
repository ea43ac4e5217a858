package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// TestE2EDecisionLogUnderLoad sends 10,000 tools/call from 16 concurrent
// streamable-HTTP clients through one gateway whose decision log rotates
// every 256 KiB, and checks that every decision has exactly one record and
// that the rotated files form one valid chain.
func TestE2EDecisionLogUnderLoad(t *testing.T) {
	const clients, calls = 16, 10_000
	key, value := testenv.Marker(t)
	sc := demoServer(t)
	sc.Env = map[string]string{key: value}
	path := filepath.Join(t.TempDir(), "decisions.log")
	g, err := New(&Config{Servers: []ServerConfig{sc},
		DecisionLog: DecisionLogConfig{Path: path, MaxBytes: 256 << 10}}, WithPolicy(rego.Demo()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	require.NoError(t, g.Start(ctx))
	srv := httptest.NewServer(g.HTTPHandler(alice))

	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "load"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
			if !assert.NoError(t, err) {
				return
			}
			defer cs.Close()
			for i := c; i < calls; i += clients {
				params := &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": i, "b": 1}}
				if i%2 == 1 { // denied by the demo policy: decided and logged, never forwarded
					params = &mcp.CallToolParams{Name: "demo__read_note", Arguments: map[string]any{"name": fmt.Sprintf("private/%d", i)}}
				}
				res, err := cs.CallTool(ctx, params)
				if assert.NoError(t, err) && i%2 == 0 {
					assert.Equal(t, fmt.Sprint(i+1), text(t, res))
				}
			}
		})
	}
	wg.Wait()
	srv.Close()
	require.NoError(t, g.Close())
	testenv.RequireNoProcess(t, key, value)

	rotated, err := filepath.Glob(path + ".*")
	require.NoError(t, err)
	require.NotEmpty(t, rotated, "the log rotated under load")
	files := append(rotated, path)
	s, err := policy.VerifyDecisionLog(files, true)
	require.NoError(t, err)
	require.Equal(t, calls, s.Records, "exactly one record per decision")

	// Each call's decision is there once: adds by their argument a, reads
	// by their (masked) request order is not recoverable, so count them.
	seenAdd := map[string]int{}
	denied := 0
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev struct {
				Input struct {
					Tool struct {
						UpstreamName string `json:"upstream_name"`
					} `json:"tool"`
					Arguments map[string]any `json:"arguments"`
				} `json:"input"`
				Result struct{ Allow bool } `json:"result"`
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
			switch ev.Input.Tool.UpstreamName {
			case "add":
				assert.True(t, ev.Result.Allow)
				seenAdd[fmt.Sprint(ev.Input.Arguments["a"])]++
			case "read_note":
				assert.False(t, ev.Result.Allow)
				denied++
			}
		}
		require.NoError(t, fh.Close())
	}
	assert.Equal(t, calls/2, denied)
	assert.Len(t, seenAdd, calls/2)
	for a, n := range seenAdd {
		if n != 1 {
			t.Errorf("add with a=%s logged %d times", a, n)
		}
	}
}
