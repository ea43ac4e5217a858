// Package logship uploads decision-log records to an OPA-compatible
// decision-log service: batches are POSTed to <url>/logs as a gzipped JSON
// array (Content-Encoding: gzip), as OPA's logs plugin does. Records wait in
// a bounded buffer (the oldest are dropped, and counted, when it is full);
// failed uploads are retried with exponential backoff. Enqueue never blocks
// and never does I/O, so a slow or dead service cannot slow decisions: the
// file log, not the upload, is what a response waits for.
package logship

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultBufferEvents = 10000
	DefaultInterval     = time.Second
	DefaultBatchBytes   = 32 << 10 // OPA's upload_size_limit_bytes, compressed
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	DefaultTimeout      = 10 * time.Second
	// closeFlushTimeout bounds the last upload attempted by Close.
	closeFlushTimeout = 2 * time.Second
)

// Options configures a Shipper. Zero values mean the defaults above.
type Options struct {
	// URL is the service's base URL; batches go to URL + "/logs".
	URL string
	// BufferEvents bounds the records waiting for upload.
	BufferEvents int
	// Interval is how long records wait to be batched with later ones.
	Interval time.Duration
	// BatchBytes bounds the uncompressed size of one upload (a single
	// larger record is sent alone).
	BatchBytes int
	// MinBackoff and MaxBackoff bound the exponential delay between
	// retries of a failed upload.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one upload request.
	Timeout time.Duration
	// MaxRecordBytes drops, rather than uploads, a record larger than
	// this (counted in Stats.Dropped); 0 uploads every record.
	MaxRecordBytes int
	// MaxPerSecond bounds the records accepted for upload per second
	// (a token bucket holding one second's worth); records beyond it are
	// dropped and counted. 0 means no bound.
	MaxPerSecond float64
	// Authorization, when set, is sent as the Authorization header of
	// every upload (e.g. "Bearer <token>"). It is never logged.
	Authorization string
	// Logger receives upload failures and drops.
	Logger *slog.Logger
}

// Stats counts what a Shipper did with the records it was given.
type Stats struct {
	// Shipped records were accepted (2xx) by the service.
	Shipped uint64
	// Dropped records were discarded unshipped: the buffer was full, or
	// they were still waiting at Close.
	Dropped uint64
	// Failures counts failed upload attempts.
	Failures uint64
}

// Shipper uploads records in the background. It is safe for concurrent
// use; Close stops its goroutine.
type Shipper struct {
	opts   Options
	url    string
	client *http.Client

	mu      sync.Mutex
	pending [][]byte
	wake    chan struct{} // buffered(1): records are waiting
	stop    chan struct{}
	done    chan struct{}
	closed  bool
	full    bool // dropping since the last successful upload (warned once)
	// tokens and refilled are the MaxPerSecond bucket; limited is set
	// while records are being dropped for the rate (warned once).
	tokens   float64
	refilled time.Time
	limited  bool

	shipped, dropped, failures atomic.Uint64
}

// New returns a Shipper for opts and starts its upload goroutine.
func New(opts Options) *Shipper {
	if opts.BufferEvents <= 0 {
		opts.BufferEvents = DefaultBufferEvents
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultBatchBytes
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Shipper{
		opts: opts,
		url:  strings.TrimRight(opts.URL, "/") + "/logs",
		// An own transport, so Close can close its idle connections and
		// leave no goroutine behind; it connects directly (no proxy from
		// the environment, as for every connection the gateway makes
		// without configuration).
		client: &http.Client{Transport: directTransport(), Timeout: opts.Timeout},
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go s.run()
	return s
}

// Enqueue hands record (one JSON object; Enqueue keeps it, the caller must
// not change it) to the upload buffer, dropping the oldest waiting record
// when the buffer is full. It never blocks on the network.
func (s *Shipper) Enqueue(record []byte) {
	if s.opts.MaxRecordBytes > 0 && len(record) > s.opts.MaxRecordBytes {
		s.dropped.Add(1)
		s.opts.Logger.Warn("decision-log record larger than the upload's max_record_bytes; not uploaded (it is in the file)",
			"bytes", len(record), "max_record_bytes", s.opts.MaxRecordBytes)
		return
	}
	s.mu.Lock()
	if s.closed || !s.allowLocked(time.Now()) {
		s.mu.Unlock()
		s.dropped.Add(1)
		return
	}
	s.pending = append(s.pending, record)
	s.trimLocked()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// allowLocked takes a token of the MaxPerSecond bucket, if there is one.
func (s *Shipper) allowLocked(now time.Time) bool {
	rate := s.opts.MaxPerSecond
	if rate <= 0 {
		return true
	}
	if s.refilled.IsZero() {
		s.tokens = rate
	} else {
		s.tokens = min(rate, s.tokens+now.Sub(s.refilled).Seconds()*rate)
	}
	s.refilled = now
	if s.tokens < 1 {
		if !s.limited {
			s.limited = true
			s.opts.Logger.Warn("decision-log upload over max_decisions_per_second; dropping records from the upload (they are in the file)",
				"max_decisions_per_second", rate)
		}
		return false
	}
	s.tokens--
	s.limited = false
	return true
}

// trimLocked drops the oldest records beyond the buffer's bound.
func (s *Shipper) trimLocked() {
	if over := len(s.pending) - s.opts.BufferEvents; over > 0 {
		clear(s.pending[:over])
		s.pending = s.pending[over:]
		s.dropped.Add(uint64(over))
		if !s.full {
			s.full = true
			s.opts.Logger.Warn("decision-log upload buffer full; dropping the oldest records until an upload succeeds")
		}
	}
}

// Stats returns the counters so far.
func (s *Shipper) Stats() Stats {
	return Stats{Shipped: s.shipped.Load(), Dropped: s.dropped.Load(), Failures: s.failures.Load()}
}

// Close stops the upload goroutine after one last attempt (bounded by a
// short timeout) to upload what is waiting; records it could not upload are
// counted as dropped. It is idempotent.
func (s *Shipper) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done

	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	defer cancel()
	for {
		batch := s.takeBatch()
		if len(batch) == 0 {
			break
		}
		if err := s.upload(ctx, batch); err != nil {
			s.mu.Lock()
			n := len(batch) + len(s.pending)
			s.pending = nil
			s.mu.Unlock()
			s.dropped.Add(uint64(n))
			s.opts.Logger.Error("decision-log upload at close failed; records not shipped", "records", n, "error", err)
			break
		}
	}
	s.client.CloseIdleConnections()
	return nil
}

func (s *Shipper) run() {
	defer close(s.done)
	backoff := time.Duration(0)
	for {
		// Wait for records, then for more to join them in one batch (or
		// for the retry delay after a failure).
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		delay := s.opts.Interval
		if backoff > 0 {
			delay = backoff
		}
		if !s.sleep(delay) {
			return
		}
		for {
			batch := s.takeBatch()
			if len(batch) == 0 {
				backoff = 0
				break
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-s.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := s.upload(ctx, batch)
			cancel()
			if err != nil {
				s.failures.Add(1)
				s.requeue(batch)
				backoff = min(max(2*backoff, s.opts.MinBackoff), s.opts.MaxBackoff)
				s.opts.Logger.Warn("decision-log upload failed; retrying", "records", len(batch), "retry_in", backoff, "error", err)
				select {
				case s.wake <- struct{}{}:
				default:
				}
				break
			}
			backoff = 0
		}
	}
}

// sleep waits d, or returns false when the Shipper is stopping.
func (s *Shipper) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

// takeBatch removes the oldest records, up to BatchBytes, from the buffer.
func (s *Shipper) takeBatch() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, size := 0, 0
	for n < len(s.pending) && (n == 0 || size+len(s.pending[n]) <= s.opts.BatchBytes) {
		size += len(s.pending[n]) + 1
		n++
	}
	batch := append([][]byte(nil), s.pending[:n]...)
	clear(s.pending[:n])
	s.pending = s.pending[n:]
	return batch
}

// requeue puts a failed batch back in front of the records that arrived
// meanwhile, then drops the oldest beyond the bound.
func (s *Shipper) requeue(batch [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(batch, s.pending...)
	s.trimLocked()
}

// upload POSTs batch as a gzipped JSON array; any status but 2xx fails.
func (s *Shipper) upload(ctx context.Context, batch [][]byte) error {
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	_, _ = zw.Write([]byte{'['})
	for i, rec := range batch {
		if i > 0 {
			_, _ = zw.Write([]byte{','})
		}
		_, _ = zw.Write(bytes.TrimRight(rec, "\n"))
	}
	_, _ = zw.Write([]byte{']'})
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress batch: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &body)
	if err != nil {
		return fmt.Errorf("upload decision log: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if s.opts.Authorization != "" {
		req.Header.Set("Authorization", s.opts.Authorization)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("upload decision log: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload decision log: %s answered %s", s.url, resp.Status)
	}
	s.shipped.Add(uint64(len(batch)))
	s.mu.Lock()
	s.full = false
	s.mu.Unlock()
	return nil
}

// directTransport is net/http's default transport without a proxy.
func directTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return tr
}
