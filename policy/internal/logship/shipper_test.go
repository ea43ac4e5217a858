package logship

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// receiver is an OPA-compatible decision-log service on loopback: it
// accepts gzipped JSON arrays on POST /logs, answering with the statuses
// queued in fail first (then 204), and keeps the events it accepted.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	events   []map[string]any
	requests int
	fail     []int
	problems []string
	auth     []string // the Authorization header of each request
}

func newReceiver(t *testing.T, fail ...int) *receiver {
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	problem := func(s string) {
		r.problems = append(r.problems, s)
		http.Error(w, s, http.StatusBadRequest)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/logs" {
		problem(fmt.Sprintf("%s %s", req.Method, req.URL.Path))
		return
	}
	if req.Header.Get("Content-Encoding") != "gzip" {
		problem("Content-Encoding " + req.Header.Get("Content-Encoding"))
		return
	}
	zr, err := gzip.NewReader(req.Body)
	if err != nil {
		problem("not gzip: " + err.Error())
		return
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		problem("bad gzip: " + err.Error())
		return
	}
	var batch []map[string]any
	if err := json.Unmarshal(body, &batch); err != nil {
		problem("not a JSON array: " + err.Error())
		return
	}
	if len(r.fail) > 0 {
		status := r.fail[0]
		r.fail = r.fail[1:]
		w.WriteHeader(status)
		return
	}
	r.events = append(r.events, batch...)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) received() (events []map[string]any, requests int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...), r.requests, append([]string(nil), r.problems...)
}

func record(i int) []byte { return fmt.Appendf(nil, `{"req_id":%d,"input":{"n":"%d"}}`+"\n", i, i) }

func TestShipperUploadsGzipJSONArrays(t *testing.T) {
	r := newReceiver(t)
	s := New(Options{URL: r.URL + "/v1/", Interval: 10 * time.Millisecond, BatchBytes: 200})
	for i := 1; i <= 50; i++ {
		s.Enqueue(record(i))
	}
	require.Eventually(t, func() bool { return s.Stats().Shipped == 50 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.Close())

	events, requests, problems := r.received()
	assert.Empty(t, problems)
	assert.Greater(t, requests, 1, "BatchBytes splits the records into several uploads")
	require.Len(t, events, 50)
	for i, ev := range events {
		assert.Equal(t, float64(i+1), ev["req_id"], "records arrive complete and in order")
		assert.Equal(t, map[string]any{"n": fmt.Sprint(i + 1)}, ev["input"])
	}
	assert.Equal(t, Stats{Shipped: 50}, s.Stats())
}

func TestShipperRetriesAfterServerError(t *testing.T) {
	r := newReceiver(t, http.StatusInternalServerError, http.StatusServiceUnavailable)
	s := New(Options{URL: r.URL + "/v1", Interval: time.Millisecond, MinBackoff: 10 * time.Millisecond})
	for i := 1; i <= 5; i++ {
		s.Enqueue(record(i))
	}
	require.Eventually(t, func() bool { return s.Stats().Shipped == 5 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.Close())
	events, requests, problems := r.received()
	assert.Empty(t, problems)
	assert.Equal(t, 3, requests, "two failures, then the same batch accepted")
	require.Len(t, events, 5)
	for i, ev := range events {
		assert.Equal(t, float64(i+1), ev["req_id"])
	}
	assert.Equal(t, Stats{Shipped: 5, Failures: 2}, s.Stats())
}

// A service that never answers holds no Enqueue up: the buffer keeps the
// newest records, counts the dropped ones, and Close still returns.
func TestShipperNeverBlocksOnDeadService(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)

	s := New(Options{URL: hung.URL, BufferEvents: 100, Interval: time.Millisecond, Timeout: time.Minute})
	for i := range 10000 {
		s.Enqueue(record(i))
	}
	require.NoError(t, s.Close())
	st := s.Stats()
	assert.Zero(t, st.Shipped)
	assert.Equal(t, uint64(10000), st.Dropped, "9900 dropped as the buffer overflowed, the last 100 at close")
}

func TestShipperRefusedConnectionDropsAtClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	s := New(Options{URL: url, Interval: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	for i := range 20 {
		s.Enqueue(record(i))
	}
	require.Eventually(t, func() bool { return s.Stats().Failures >= 3 }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.Close())
	st := s.Stats()
	assert.Zero(t, st.Shipped)
	assert.Equal(t, uint64(20), st.Dropped)
	s.Enqueue(record(21))
	assert.Equal(t, uint64(21), s.Stats().Dropped, "records after Close are counted as dropped")
}

// TestShipperLimitsAndAuthorization: a record over MaxRecordBytes and
// records over MaxPerSecond are dropped and counted, never uploaded; every
// upload carries the Authorization header, which no log line shows.
func TestShipperLimitsAndAuthorization(t *testing.T) {
	r := newReceiver(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	s := New(Options{URL: r.URL + "/v1", Interval: 10 * time.Millisecond, MaxRecordBytes: 60, MaxPerSecond: 5,
		Authorization: "Bearer upload-s3cret", Logger: slog.New(slog.NewTextHandler(&lockedWriter{&logMu, &logs}, nil))})
	s.Enqueue(append(record(0)[:0:0], fmt.Sprintf(`{"req_id":0,"input":{"big":%q}}`, strings.Repeat("x", 100))...))
	start := time.Now()
	for i := 1; i <= 20; i++ {
		s.Enqueue(record(i))
	}
	burst := time.Since(start)
	require.NoError(t, s.Close())

	events, requests, problems := r.received()
	assert.Empty(t, problems)
	st := s.Stats()
	assert.Len(t, events, int(st.Shipped))
	// One second's worth of records, then what the bucket refilled
	// while the loop ran (nothing on an idle machine).
	assert.GreaterOrEqual(t, st.Shipped, uint64(5))
	assert.LessOrEqual(t, st.Shipped, uint64(5+burst.Seconds()*5+1))
	assert.Equal(t, 21-st.Shipped, st.Dropped, "the oversized record and those over the rate")
	for _, ev := range events {
		assert.NotContains(t, ev["input"], "big")
	}
	r.mu.Lock()
	assert.Len(t, r.auth, requests)
	for _, a := range r.auth {
		assert.Equal(t, "Bearer upload-s3cret", a)
	}
	r.mu.Unlock()
	logMu.Lock()
	defer logMu.Unlock()
	assert.Contains(t, logs.String(), "max_record_bytes")
	assert.Contains(t, logs.String(), "max_decisions_per_second")
	assert.NotContains(t, logs.String(), "s3cret")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Uploads connect directly: proxy environment variables are not used.
func TestShipperUsesNoEnvironmentProxy(t *testing.T) {
	s := New(Options{URL: "http://logs.example"})
	defer s.Close()
	tr, ok := s.client.Transport.(*http.Transport)
	require.True(t, ok)
	assert.Nil(t, tr.Proxy)
}
