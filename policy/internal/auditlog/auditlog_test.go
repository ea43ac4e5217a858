package auditlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCanonicalEncoding(t *testing.T) {
	cases := map[string]string{
		`{"b":1,"a":[true,false,null]}`:              `{"a":[true,false,null],"b":1}`,
		" { \"z\" : { \"y\":2, \"x\":1.50e3 } } ":    `{"z":{"x":1.50e3,"y":2}}`,
		`{"s":"\u0041\/\u00e9\ud83d\ude00\u001f\t"}`: "{\"s\":\"A/é😀\\u001f\\t\"}",
		`{"<":"&>"}`:      `{"<":"&>"}`,
		`{}`:              `{}`,
		`{"a":{},"b":[]}`: `{"a":{},"b":[]}`,
	}
	for in, want := range cases {
		rec, err := canonicalRecord(nil, []byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, string(rec.canonical), in)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1}x`, `[1]`, `{"a":01}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"a":tru}`, `{"a":1,}`, `{"a":"x` + "\n" + `"}`} {
		_, err := canonicalRecord(nil, []byte(bad))
		assert.Error(t, err, bad)
	}
}

// writeChain appends n records through a file Writer and returns the file.
func writeChain(t *testing.T, dir string, n int, opts Options) string {
	t.Helper()
	path := filepath.Join(dir, "decisions.log")
	w, err := Open(path, opts)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, appendErr(w, fmt.Appendf(nil, `{"n":%d,"input":{"tool":"t","note":"line\n%d"}}`, i, i)))
	}
	require.NoError(t, w.Close())
	return path
}

func lines(t *testing.T, path string) [][]byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return bytes.SplitAfter(b, []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

func rewrite(t *testing.T, path string, ls [][]byte) {
	require.NoError(t, os.WriteFile(path, bytes.Join(ls, nil), 0o600))
}

func TestVerifyIntactChainAndReserialized(t *testing.T) {
	path := writeChain(t, t.TempDir(), 5, Options{})
	s, err := Verify([]string{path}, true, nil)
	require.NoError(t, err)
	assert.Equal(t, 5, s.Records)
	assert.Equal(t, Genesis, s.FirstPrev)

	// A reader re-serializing records (indentation, key order) keeps them
	// valid: the hash is over the canonical form, not the bytes.
	ls := lines(t, path)
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(ls[2]))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	ls[2] = append(b, '\n')
	rewrite(t, path, ls)
	_, err = Verify([]string{path}, true, nil)
	assert.NoError(t, err)
}

func TestVerifyNamesTheFirstTamperedRecord(t *testing.T) {
	cases := map[string]struct {
		tamper   func([][]byte) [][]byte
		line     int
		kind     string
		contains string
	}{
		"edited": {func(ls [][]byte) [][]byte {
			ls[3] = bytes.Replace(ls[3], []byte(`"n":3`), []byte(`"n":4`), 1)
			return ls
		}, 4, KindEdited, "hashes to"},
		"edited hash too": {func(ls [][]byte) [][]byte {
			// Recomputing the edited record's own hash still breaks the link
			// of the record after it.
			rec, _ := canonicalRecord(nil, bytes.Replace(ls[3], []byte(`"n":3`), []byte(`"n":4`), 1)[:len(ls[3])-1])
			h := hashOf(rec.canonical)
			ls[3] = append(append(rec.canonical[:len(rec.canonical)-1], `,"hash":"`+h+`"}`...), '\n')
			return ls
		}, 5, KindChainBroken, "deleted or records were reordered"},
		"deleted": {func(ls [][]byte) [][]byte { return slices.Delete(ls, 2, 3) }, 3, KindChainBroken, "deleted"},
		"reordered": {func(ls [][]byte) [][]byte {
			ls[1], ls[2] = ls[2], ls[1]
			return ls
		}, 2, KindChainBroken, "reordered"},
		"truncated": {func(ls [][]byte) [][]byte {
			ls[5] = ls[5][:len(ls[5])/2]
			return ls
		}, 6, KindTruncated, "ends inside a record"},
		"first deleted": {func(ls [][]byte) [][]byte { return ls[1:] }, 1, KindChainBroken, "does not start a chain"},
		"garbage line": {func(ls [][]byte) [][]byte {
			return slices.Insert(ls, 4, []byte("hello\n"))
		}, 5, KindMalformed, "not a JSON object"},
		"hash removed": {func(ls [][]byte) [][]byte {
			ls[0] = append(bytes.Split(ls[0], []byte(`,"hash":`))[0], '}', '\n')
			return ls
		}, 1, KindMalformed, `"hash"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeChain(t, t.TempDir(), 6, Options{})
			rewrite(t, path, tc.tamper(lines(t, path)))
			_, err := Verify([]string{path}, true, nil)
			var p *Problem
			require.ErrorAs(t, err, &p)
			assert.Equal(t, path, p.File)
			assert.Equal(t, tc.line, p.Line, p.Error())
			assert.Equal(t, tc.kind, p.Kind, p.Error())
			assert.Contains(t, p.Error(), tc.contains)
		})
	}
}

func TestRotationKeepsTheChainAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	path := writeChain(t, dir, 40, Options{MaxBytes: 1500, Sync: SyncAlways})
	rotated, err := filepath.Glob(path + ".*")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(rotated), 3, "rotated by size")
	slices.Sort(rotated)
	files := append(rotated, path)
	total := 0
	for _, f := range files {
		st, err := os.Stat(f)
		require.NoError(t, err)
		assert.LessOrEqual(t, st.Size(), int64(1500))
		total += len(lines(t, f))
	}
	assert.Equal(t, 40, total, "no record lost in rotation")
	s, err := Verify(files, true, nil)
	require.NoError(t, err)
	assert.Equal(t, 40, s.Records)

	// A missing middle file, files out of order, and the last record of a
	// rotated file removed are all named.
	_, err = Verify(append([]string{files[0]}, files[2:]...), true, nil)
	var p *Problem
	require.ErrorAs(t, err, &p)
	assert.Equal(t, files[2], p.File)
	assert.Equal(t, 1, p.Line)

	_, err = Verify([]string{files[1], files[0]}, true, nil)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, files[1], p.File, "the later file does not start the chain")

	ls := lines(t, files[0])
	rewrite(t, files[0], ls[:len(ls)-1])
	_, err = Verify(files, true, nil)
	require.ErrorAs(t, err, &p)
	assert.Equal(t, files[1], p.File)
	assert.Equal(t, 1, p.Line)
	assert.Equal(t, KindChainBroken, p.Kind)

	// Retention: later files alone verify when not required to start a chain.
	_, err = Verify(files[2:], false, nil)
	assert.NoError(t, err)
}

func TestReopenContinuesTheChain(t *testing.T) {
	dir := t.TempDir()
	path := writeChain(t, dir, 3, Options{})
	writeChain(t, dir, 3, Options{}) // same path, reopened
	s, err := Verify([]string{path}, true, nil)
	require.NoError(t, err)
	assert.Equal(t, 6, s.Records)

	// After rotation, a fresh active file continues from the newest rotated one.
	require.NoError(t, os.Rename(path, path+".20200101T000000.000000000Z"))
	writeChain(t, dir, 2, Options{})
	_, err = Verify([]string{path + ".20200101T000000.000000000Z", path}, true, nil)
	require.NoError(t, err)
}

func TestOpenRefusesADamagedTail(t *testing.T) {
	path := writeChain(t, t.TempDir(), 3, Options{})
	ls := lines(t, path)
	rewrite(t, path, [][]byte{ls[0], ls[1], ls[2][:10]})
	_, err := Open(path, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "incomplete record")

	rewrite(t, path, append(ls[:2:2], bytes.Replace(ls[2], []byte(`"n":2`), []byte(`"n":9`), 1)))
	_, err = Open(path, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not match its hash")
}

func TestConcurrentAppendsFormOneChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.log")
	w, err := Open(path, Options{MaxBytes: 64 << 10})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				assert.NoError(t, appendErr(w, fmt.Appendf(nil, `{"g":%d,"i":%d}`, g, i)))
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())
	files, _ := filepath.Glob(path + ".*")
	slices.Sort(files)
	s, err := Verify(append(files, path), true, nil)
	require.NoError(t, err)
	assert.Equal(t, 1600, s.Records)
	assert.Error(t, appendErr(w, []byte(`{}`)), "closed")
}

func TestAppendRejectsNonObjectsAndOwnHashFields(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	assert.Error(t, appendErr(w, []byte(`[1]`)))
	assert.Error(t, appendErr(w, []byte(`{"hash":"x"}`)))
	assert.Error(t, appendErr(w, []byte(`{"prev_hash":"x"}`)))
	require.NoError(t, appendErr(w, []byte(`{}`)))
	assert.True(t, strings.HasPrefix(buf.String(), `{"prev_hash":"`+Genesis+`","hash":"`), buf.String())
}

// appendErr is the error of w.Append(event).
func appendErr(w *Writer, event []byte) error {
	_, err := w.Append(event)
	return err
}
