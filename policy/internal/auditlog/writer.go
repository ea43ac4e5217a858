// Package auditlog writes and verifies hash-chained JSON-lines logs: every
// record carries the hash of the record before it ("prev_hash") and its own
// hash ("hash", sha256 over the canonical encoding of the record without
// "hash"), so editing, deleting, reordering or truncating records is
// detectable. Rotation by size keeps the chain across files.
package auditlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Genesis is the prev_hash of the first record of a chain.
var Genesis = string(bytes.Repeat([]byte("0"), sha256.Size*2))

// SyncPolicy says when appended records are forced to stable storage.
type SyncPolicy int

const (
	// SyncInterval hands every record to the kernel with write(2) before
	// Append returns (it survives a crash of the process) and fsyncs at
	// most SyncInterval later (it survives a crash of the machine after
	// that).
	SyncInterval SyncPolicy = iota
	// SyncAlways fsyncs every record before Append returns.
	SyncAlways
	// SyncNever leaves flushing to the kernel.
	SyncNever
)

// DefaultSyncInterval is the fsync delay of SyncInterval when none is set.
const DefaultSyncInterval = time.Second

// Options configures a file Writer.
type Options struct {
	// MaxBytes rotates the file before a record would make it larger; 0
	// never rotates. The rotated file is renamed to
	// <path>.<UTC time>, which sorts in write order.
	MaxBytes int64
	// Sync is the fsync policy; SyncInterval waits Interval (default
	// DefaultSyncInterval).
	Sync     SyncPolicy
	Interval time.Duration
}

// Writer appends records to a chain. It is safe for concurrent use; records
// are chained in the order Append calls take the lock, which is the order
// they are written.
type Writer struct {
	opts Options
	path string // empty for a Writer over an io.Writer

	mu      sync.Mutex
	w       io.Writer
	f       *os.File
	fd      uintptr // f's descriptor, written to directly
	size    int64
	prev    [sha256.Size * 2]byte
	syncErr error // a failed fsync: the log may have lost records
	timer   *time.Timer
	pending sync.WaitGroup // running interval syncs
	closed  bool
	tee     func(record []byte)
	// file counts the files written to: 1, then one more per rotation.
	file uint64
}

// Tee makes every record, once written, also go to f, called under the
// Writer's lock so that f sees records in chain order; f owns the record
// and must not block. Call Tee before the first Append.
func (w *Writer) Tee(f func(record []byte)) { w.tee = f }

// NewWriter returns a Writer appending a chain from Genesis to w, with no
// rotation and no fsync.
func NewWriter(w io.Writer) *Writer {
	lw := &Writer{w: w, opts: Options{Sync: SyncNever}, file: 1}
	copy(lw.prev[:], Genesis)
	return lw
}

// Open returns a Writer appending to the file at path (created with mode
// 0600), continuing the chain of its last record, or of the newest rotated
// file when path is missing or empty. It refuses a file whose last record
// is incomplete or does not match its hash: that file needs `audit verify`
// and an operator's look before anything is added to it.
func Open(path string, opts Options) (*Writer, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultSyncInterval
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	w := &Writer{opts: opts, path: path, w: f, f: f, fd: f.Fd(), file: 1}
	copy(w.prev[:], Genesis)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	w.size = st.Size()
	last, err := lastHash(f, w.size)
	if err == nil && last == "" {
		last, err = newestRotatedHash(path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open decision log %s: %w", path, err)
	}
	if last != "" {
		copy(w.prev[:], last)
	}
	return w, nil
}

// Appended says where a record went: its hash, and the file it was
// written to, counted from 1 for the file the Writer opened and increased by
// each rotation. The hash is kept as an array, so that a caller that does
// not ask for it costs no allocation.
type Appended struct {
	hash [sha256.Size * 2]byte // zero when no record was written
	File uint64
}

// Hash is the record's hash in hex, or "" when no record was written.
func (a Appended) Hash() string {
	if a.hash[0] == 0 {
		return ""
	}
	return string(a.hash[:])
}

// Append writes event, a JSON object without "prev_hash" and "hash", as
// the next record of the chain, and returns once the record is written as
// the sync policy requires. On error nothing of the record remains in the
// file, and the chain is unchanged.
func (w *Writer) Append(event []byte) (Appended, error) { return w.AppendIn(event, 0) }

// AppendIn is Append, refusing the record (ErrOtherFile) unless it would
// be written to the file numbered onlyInFile, when that is not zero.
func (w *Writer) AppendIn(event []byte, onlyInFile uint64) (Appended, error) {
	srcBuf := placeholderBuffers.Get().(*[]byte)
	src := withPrevPlaceholder((*srcBuf)[:0], event)
	rec, err := canonicalRecord(make([]byte, 0, len(src)+100), src)
	*srcBuf = src[:0] // rec holds nothing of src
	placeholderBuffers.Put(srcBuf)
	if err != nil {
		return Appended{}, fmt.Errorf("encode record: %w", err)
	}
	if rec.prevAt < 0 || rec.hash != "" {
		return Appended{}, errors.New("encode record: event carries its own hash fields")
	}
	return w.append(rec.canonical, rec.prevAt, onlyInFile)
}

// Encoded is a record its caller encoded in the canonical form: a JSON
// object without "hash", whose "prev_hash" member was written by
// AppendPrevHash at its sorted place.
type Encoded struct {
	Canonical []byte
	PrevAt    int
	// OnlyInFile, when not zero, makes AppendEncoded refuse the record
	// (ErrOtherFile) unless it would be written to that file: a record
	// that refers to an earlier one by hash stays in that one's file.
	OnlyInFile uint64
}

// ErrOtherFile is AppendEncoded's answer when the record would not be
// written to Encoded.OnlyInFile; nothing is written.
var ErrOtherFile = errors.New("record would be written to another file")

// AppendEncoded is Append of a record already in canonical form, which
// saves canonicalizing it. The caller keeps rec.Canonical, which it may
// reuse once AppendEncoded returns; its spare capacity is written to.
func (w *Writer) AppendEncoded(rec Encoded) (Appended, error) {
	const placeholder = `"prev_hash":"`
	if rec.PrevAt < len(placeholder) || rec.PrevAt+len(Genesis)+1 > len(rec.Canonical) ||
		string(rec.Canonical[rec.PrevAt-len(placeholder):rec.PrevAt]) != placeholder {
		return Appended{}, errors.New("encode record: no prev_hash member at the given offset")
	}
	return w.append(rec.Canonical, rec.PrevAt, rec.OnlyInFile)
}

// append chains and writes line, canonical with a placeholder prev_hash
// at prevAt.
func (w *Writer) append(line []byte, prevAt int, onlyInFile uint64) (Appended, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return Appended{}, errors.New("decision log closed")
	case w.syncErr != nil:
		return Appended{}, fmt.Errorf("decision log: earlier fsync failed, records may be lost: %w", w.syncErr)
	}
	copy(line[prevAt:], w.prev[:])
	sum := sha256.Sum256(line)
	var hash [sha256.Size * 2]byte
	hex.Encode(hash[:], sum[:])
	line = append(line[:len(line)-1], `,"hash":"`...)
	line = append(line, hash[:]...)
	line = append(line, '"', '}', '\n')

	rotate := w.f != nil && w.opts.MaxBytes > 0 && w.size > 0 && w.size+int64(len(line)) > w.opts.MaxBytes
	if onlyInFile != 0 && (onlyInFile != w.file || rotate) {
		return Appended{}, ErrOtherFile
	}
	if rotate {
		if err := w.rotate(); err != nil {
			return Appended{}, err
		}
	}
	if err := w.write(line); err != nil {
		if w.f != nil {
			_ = w.f.Truncate(w.size) // leave no partial record behind
		}
		return Appended{}, fmt.Errorf("write decision log: %w", err)
	}
	w.size += int64(len(line))
	w.prev = hash
	if w.f != nil {
		switch w.opts.Sync {
		case SyncAlways:
			if err := w.f.Sync(); err != nil {
				w.syncErr = err
				return Appended{}, fmt.Errorf("fsync decision log: %w", err)
			}
		case SyncInterval:
			if w.timer == nil {
				w.pending.Add(1)
				w.timer = time.AfterFunc(w.opts.Interval, w.intervalSync)
			}
		}
	}
	if w.tee != nil {
		w.tee(bytes.Clone(line)) // line may be the caller's buffer
	}
	return Appended{hash: hash, File: w.file}, nil
}

// write hands line to the kernel: a file's with write(2) on its
// descriptor directly (os.File's locking and poller bookkeeping are
// redundant under w.mu), an io.Writer's with Write.
func (w *Writer) write(line []byte) error {
	if w.f == nil {
		_, err := w.w.Write(line)
		return err
	}
	fd := int(w.fd)
	for len(line) > 0 {
		n, err := syscall.Write(fd, line)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return &os.PathError{Op: "write", Path: w.f.Name(), Err: err}
		case n == 0:
			return io.ErrShortWrite
		}
		line = line[n:]
	}
	runtime.KeepAlive(w.f) // its finalizer would close fd
	return nil
}

// placeholderBuffers are reused by Append for the event with its
// placeholder, which only lives until it is canonicalized.
var placeholderBuffers = sync.Pool{New: func() any { return new([]byte) }}

// withPrevPlaceholder appends to b event with a prev_hash member added,
// whose value Append fills in under the lock.
func withPrevPlaceholder(b, event []byte) []byte {
	event = bytes.TrimSpace(event)
	if len(event) < 2 || event[0] != '{' {
		return append(b, event...) // canonicalRecord reports it
	}
	b = append(b, `{"prev_hash":"`...)
	b = append(b, Genesis...)
	b = append(b, '"')
	if rest := bytes.TrimSpace(event[1:]); len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	return append(b, event[1:]...)
}

func (w *Writer) intervalSync() {
	defer w.pending.Done()
	w.mu.Lock()
	f := w.f
	w.timer = nil
	w.mu.Unlock()
	if f == nil {
		return
	}
	// fsync outside the lock so writers are not held up; a rotation that
	// closes f meanwhile has synced it itself.
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		w.mu.Lock()
		w.syncErr = err
		w.mu.Unlock()
	}
}

// rotate renames the current file aside and opens a fresh one. The chain
// continues: the new file's first record names the old file's last hash.
func (w *Writer) rotate() error {
	if err := w.f.Sync(); err != nil {
		w.syncErr = err
		return fmt.Errorf("rotate decision log: %w", err)
	}
	rotated := w.path + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(w.path, rotated); err != nil {
		return fmt.Errorf("rotate decision log: %w", err)
	}
	f, err := os.OpenFile(w.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		// Keep writing to the renamed file rather than lose records.
		return fmt.Errorf("rotate decision log: %w", err)
	}
	_ = w.f.Close()
	w.f, w.w, w.fd, w.size = f, f, f.Fd(), 0
	w.file++
	if w.opts.Sync != SyncNever {
		syncDir(filepath.Dir(w.path))
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// LastHash is the hash of the last record of the chain: the prev_hash of
// the next one.
func (w *Writer) LastHash() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.prev[:])
}

// Close syncs and closes the file (if the Writer owns one). Appends after
// Close fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.timer != nil && w.timer.Stop() {
		w.pending.Done()
	}
	w.timer = nil
	f := w.f
	w.f = nil
	w.mu.Unlock()
	w.pending.Wait()
	if f == nil {
		return nil
	}
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lastHash returns the hash of the last record of the file of the given
// size, or "" for an empty file, after checking that record is complete
// and intact.
func lastHash(f *os.File, size int64) (string, error) {
	if size == 0 {
		return "", nil
	}
	line, err := lastLine(f, size)
	if err != nil {
		return "", err
	}
	rec, err := canonicalRecord(nil, line)
	if err != nil {
		return "", fmt.Errorf("its last record is not valid (%v); run `mcp-warden audit verify` on it and move it aside", err)
	}
	if !validHash(rec.hash) || rec.hash != hashOf(rec.canonical) {
		return "", errors.New("its last record does not match its hash; run `mcp-warden audit verify` on it and move it aside")
	}
	return rec.hash, nil
}

// lastLine reads the last line of a non-empty file, reading backwards in
// chunks so opening a large log costs little.
func lastLine(f *os.File, size int64) ([]byte, error) {
	const chunk = 64 << 10
	var tail []byte
	for off := size; off > 0; {
		n := min(int64(chunk), off)
		off -= n
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil {
			return nil, err
		}
		tail = append(buf, tail...)
		if tail[len(tail)-1] != '\n' {
			return nil, errors.New("it ends with an incomplete record (the last line has no newline); run `mcp-warden audit verify` on it and move it aside")
		}
		if i := bytes.LastIndexByte(tail[:len(tail)-1], '\n'); i >= 0 || off == 0 {
			return tail[i+1 : len(tail)-1], nil
		}
	}
	return nil, errors.New("empty")
}

// newestRotatedHash continues the chain of the newest rotated sibling of
// path, so that a fresh active file after rotation or deletion still links.
func newestRotatedHash(path string) (string, error) {
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil || len(matches) == 0 {
		return "", nil
	}
	slices.Sort(matches)
	newest := matches[len(matches)-1]
	f, err := os.Open(newest)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	h, err := lastHash(f, st.Size())
	if err != nil {
		return "", fmt.Errorf("rotated file %s: %w", newest, err)
	}
	return h, nil
}

func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}

func hashOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

func validHash(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
