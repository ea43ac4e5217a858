package auditlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomDoc is a random JSON-like document: nested maps and slices,
// strings with escapes, control characters, non-ASCII, invalid UTF-8 and
// U+2028, numbers of every shape, json.Number, booleans and nulls.
func randomDoc(r *rand.Rand, depth int) any {
	k := r.IntN(10)
	if depth > 4 {
		k = r.IntN(6)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomString(r)
	case 3:
		return []float64{0, -0.0, 1e-7, 1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, -3.5e-300, 1e20}[r.IntN(9)] * float64(r.IntN(3)-1)
	case 4:
		return json.Number([]string{"1", "-0", "1.50", "2e10", "1E-3", "12345678901234567890"}[r.IntN(6)])
	case 5:
		return r.Int64() - r.Int64()
	case 6, 7:
		m := map[string]any{}
		for range r.IntN(6) {
			m[randomString(r)] = randomDoc(r, depth+1)
		}
		return m
	default:
		s := make([]any, r.IntN(5))
		for i := range s {
			s[i] = randomDoc(r, depth+1)
		}
		return s
	}
}

func randomString(r *rand.Rand) string {
	parts := []string{"a", "Z", "é", "日本", "😀", "\"", "\\", "/", "<", ">", "&", "\n", "\t", "\b", "\f", "\r", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\xff", "\xc3", "hash", "prev_hash", " "}
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

// TestAppendCanonicalEqualsMarshalThenCanonicalize: over random documents,
// encoding directly gives exactly the bytes of json.Marshal followed by
// canonicalization.
func TestAppendCanonicalEqualsMarshalThenCanonicalize(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 2026))
	for i := range 20000 {
		doc := map[string]any{"doc": randomDoc(r, 0)}
		marshalled, err := json.Marshal(doc)
		require.NoError(t, err)
		want, wantErr := canonicalRecord(nil, marshalled)
		got, err := AppendCanonical(nil, doc)
		if wantErr != nil {
			// Keys that differ only in invalid UTF-8 collide once both
			// are repaired: refused either way.
			require.ErrorContains(t, wantErr, "duplicate key")
			require.ErrorContains(t, err, "duplicate key")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, string(want.canonical), string(got), "document %d: %s", i, marshalled)
	}
}

type embedded struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type shadow struct {
	A string `json:"a"`
}

type structDoc struct {
	embedded
	*shadow  `json:"shadow,omitempty"`
	Z        string `json:"z"`
	Omitted  string `json:"-"`
	Untagged float32
	Empty    []string          `json:"empty,omitempty"`
	NilSlice []string          `json:"nil_slice"`
	Bytes    []byte            `json:"bytes"`
	Raw      json.RawMessage   `json:"raw"`
	Ptr      *int              `json:"ptr"`
	IntKeys  map[int]string    `json:"int_keys"`
	Zero     struct{ X int }   `json:"zero,omitzero"`
	Nested   map[string]any    `json:"nested"`
	Labels   map[string]string `json:"labels,omitempty"`
	private  string
}

func TestAppendCanonicalStructsAsEncodingJSON(t *testing.T) {
	seven := 7
	for _, v := range []any{
		structDoc{embedded: embedded{A: "x", B: 2}, shadow: &shadow{A: "s"}, Z: "z", Omitted: "no", Untagged: 1.25,
			Bytes: []byte("\x00bytes"), Raw: json.RawMessage(`{ "b": 1, "a": [1.50, "\u00e9"] }`), Ptr: &seven,
			IntKeys: map[int]string{10: "ten", -1: "minus one", 2: "two"}, Nested: map[string]any{"k": []any{nil, true}}, private: "p"},
		structDoc{Raw: json.RawMessage(`null`)},
		&structDoc{Raw: json.RawMessage(`[]`), Labels: map[string]string{}},
	} {
		marshalled, err := json.Marshal(v)
		require.NoError(t, err)
		want, err := canonicalRecord(nil, marshalled)
		require.NoError(t, err)
		got, err := AppendCanonical(nil, v)
		require.NoError(t, err)
		require.Equal(t, string(want.canonical), string(got), "%s", marshalled)
	}
}

// TestAppendEncodedEqualsAppend: a record encoded by hand with
// AppendPrevHash and AppendCanonical gets the bytes, hash and chain that
// Append gives the same event; a misplaced prev_hash is refused.
func TestAppendEncodedEqualsAppend(t *testing.T) {
	var viaText, encoded bytes.Buffer
	tw, ew := NewWriter(&viaText), NewWriter(&encoded)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 200 {
		doc := randomDoc(r, 0)
		marshalled, err := json.Marshal(map[string]any{"a": i, "doc": doc})
		require.NoError(t, err)
		want, err := tw.Append(marshalled)
		if err != nil {
			continue // a document with colliding repaired keys
		}
		b := fmt.Appendf(nil, `{"a":%d,"doc":`, i)
		b, err = AppendCanonical(b, doc)
		require.NoError(t, err)
		b = append(b, ',')
		b, at := AppendPrevHash(b)
		b = append(b, '}')
		got, err := ew.AppendEncoded(Encoded{Canonical: b, PrevAt: at})
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.Equal(t, viaText.String(), encoded.String())
	_, err := ew.AppendEncoded(Encoded{Canonical: []byte(`{"a":1}`), PrevAt: 3})
	require.Error(t, err)
}

// TestAppendEncodedOnlyInFile: a record bound to a file is refused once
// the log has rotated, or when it would make the log rotate.
func TestAppendEncodedOnlyInFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.log")
	w, err := Open(path, Options{MaxBytes: 400})
	require.NoError(t, err)
	defer w.Close()
	rec := func(file uint64) Encoded {
		b, at := AppendPrevHash([]byte(`{"n":1,`))
		return Encoded{Canonical: append(b, '}'), PrevAt: at, OnlyInFile: file}
	}
	first, err := w.AppendEncoded(rec(0))
	require.NoError(t, err)
	require.Equal(t, uint64(1), first.File)
	_, err = w.AppendEncoded(rec(1))
	require.NoError(t, err)
	_, err = w.AppendEncoded(rec(1)) // would rotate
	require.ErrorIs(t, err, ErrOtherFile)
	next, err := w.AppendEncoded(rec(0))
	require.NoError(t, err)
	require.Equal(t, uint64(2), next.File)
	_, err = w.AppendEncoded(rec(1))
	require.ErrorIs(t, err, ErrOtherFile)
	files, _ := filepath.Glob(path + ".*")
	s, err := Verify(append(files, path), true, nil)
	require.NoError(t, err)
	require.Equal(t, 3, s.Records)
}

// TestPlainPrefixFindsTheFirstByteToEscape: the word-at-a-time scan stops
// exactly where a byte-at-a-time one does, over strings long enough to be
// read in words, with every kind of byte at every position.
func TestPlainPrefixFindsTheFirstByteToEscape(t *testing.T) {
	slowPrefix := func(s string) int {
		for i := 0; i < len(s); i++ {
			if b := s[i]; b < 0x20 || b >= 0x80 || b == '"' || b == '\\' {
				return i
			}
		}
		return len(s)
	}
	r := rand.New(rand.NewPCG(8, 2026))
	for n := range 40 {
		for b := range 256 {
			for _, at := range []int{0, n / 2, n - 1} {
				if n == 0 || at < 0 {
					continue
				}
				s := []byte(strings.Repeat("a~ Z", 10)[:n])
				s[at] = byte(b)
				if r.IntN(2) == 0 && n > 1 { // a second odd byte later
					s[n-1] = byte(r.IntN(256))
				}
				require.Equal(t, slowPrefix(string(s)), plainPrefix(string(s)), "%q", s)
				require.Equal(t, slowPrefix(string(s)), plainPrefix(s), "%q", s)
				require.Equal(t, string(appendString(nil, toValidUTF8(string(s)))), string(appendValidString(nil, string(s))), "%q", s)
			}
		}
	}
}
