package policy_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/rego"
)

// The upload carries exactly the records of the file log (masked, chained,
// in order), even when the service fails first and the batch is retried.
func TestUploadShipsTheFileRecordsAfterRetry(t *testing.T) {
	var mu sync.Mutex
	var received []json.RawMessage
	failures := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" {
			http.Error(w, "want gzip POST /logs", http.StatusBadRequest)
			return
		}
		if failures > 0 {
			failures--
			http.Error(w, "try later", http.StatusInternalServerError)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err == nil {
			var batch []json.RawMessage
			if err = json.NewDecoder(zr).Decode(&batch); err == nil {
				received = append(received, batch...)
				return
			}
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
	}))
	defer srv.Close()

	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := policy.OpenDecisionLog(path, policy.DecisionLogOptions{
		Redact: []string{"hunter2"},
		Upload: policy.UploadOptions{URL: srv.URL, Interval: 10 * time.Millisecond}})
	require.NoError(t, err)
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	for range 20 {
		d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", map[string]any{"token": "hunter2"}))
	}
	require.Eventually(t, func() bool { return l.UploadStats().Shipped == 20 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Close())
	assert.Equal(t, policy.UploadStats{Shipped: 20, Failures: 1}, l.UploadStats())

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var onDisk []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		onDisk = append(onDisk, sc.Text())
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, received, 20)
	require.Len(t, onDisk, 20)
	for i := range onDisk {
		assert.JSONEq(t, onDisk[i], string(received[i]), "record %d", i)
		assert.NotContains(t, string(received[i]), "hunter2")
		assert.NotContains(t, string(received[i]), `"arguments"`, "masked as on disk")
	}
}

// A service that never answers does not hold decisions up: they are all
// made and logged, and the upload counts what it had to drop.
func TestUploadToDeadServiceNeverBlocksDecisions(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	var buf bytes.Buffer
	l := policy.NewDecisionLog(&syncWriter{w: &buf}, policy.DecisionLogOptions{
		Upload: policy.UploadOptions{URL: srv.URL, BufferEvents: 10, Interval: time.Millisecond}})
	engine, err := policy.NewRegoEngine(context.Background(), rego.Default(), serverData)
	require.NoError(t, err)
	d := policy.NewDecider(engine, l)
	const calls = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range calls {
			d.Decide(context.Background(), input(policy.ActionToolsCall, "read_file", nil))
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a guard against a hang, not a timing
		t.Fatal("decisions blocked behind the upload")
	}
	require.NoError(t, l.Close())
	assert.Equal(t, calls, bytes.Count(buf.Bytes(), []byte("\n")), "every decision logged")
	st := l.UploadStats()
	assert.Zero(t, st.Shipped)
	assert.Equal(t, uint64(calls), st.Dropped, "overflow and close drop every record, and count them")
}
