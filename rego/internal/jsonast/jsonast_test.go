package jsonast

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// reference is what Parse must agree with: OPA's own JSON decoding.
func reference(data []byte) (ast.Value, error) {
	var x any
	if err := util.UnmarshalJSON(data, &x); err != nil {
		return nil, err
	}
	return ast.InterfaceToValue(x)
}

var corpus = []string{
	// valid
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `42`, `100`, `1234567890123456789012345678901234567890`,
	`1.5`, `-0.25`, `1e10`, `1E+2`, `2.5e-3`, `0e0`, `1e400`, `1e-400`, `1e1000000000000`,
	`""`, `"a"`, `"hello world"`, `"\"\\\/\b\f\n\r\t"`, `"\u0041\u00e9\u4e2d"`, `"\ud83d\ude00"`,
	`"é中😀"`, `"\ud800"`, `"\udc00"`, `"\ud800x"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `"\ud800\udc00\udc00"`,
	"\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"",
	`[]`, `[1]`, `[1,2,3]`, ` [ 1 , "a" , null , true , [ ] , { } ] `, `{}`, `{"a":1}`,
	`{"a":{"b":[{"c":null}]}}`, `[1,{"a":2}]`, `[[1,2],{"a":[3,{"b":4,"b":5}],"c":6},7]`, `{"a":[1,2],"b":{"c":[3]},"d":4}`,
	`[{"a":1},{"b":[2,{"c":3}]},[{"d":4}]]`, `{"x":[{"y":[{"z":[1,2,3]}]}],"w":0}`, `{"a":1,"a":2}`, `{"a":1,"b":2,"a":3}`, `{"":""}`,
	"\t\r\n {\"k\" : \"v\"} \n",
	`{"action":"tools/call","arguments":{"name":"private/x","n":4096},"tool":{"upstream_name":"read_note"}}`,
	// invalid
	``, ` `, `{`, `}`, `[`, `]`, `[1,]`, `[,1]`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{'a':1}`,
	`{"a" 1}`, `[1 2]`, `01`, `-`, `+1`, `.5`, `1.`, `1.e3`, `1e`, `1e+`, `--1`, `0x10`, `NaN`, `Infinity`, `nan`, `inf`,
	`tru`, `nul`, `truex`, `nulll`, `True`, `"abc`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\nb\"", "\"\x00\"", "\"\x1f\"",
	`{} {}`, `1 2`, `[] x`, `"a" "b"`, `{"a":1}}`, `[[]]]`, "\x00", `"\`, `"\u`, `"\ud800\u12"`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat(`{"a":`, 3000) + "1" + strings.Repeat("}", 3000),
}

func check(t *testing.T, data []byte) {
	t.Helper()
	got, err := Parse(data)
	want, wantErr := reference(data)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("Parse(%.80q): error %v, reference error %v", data, err, wantErr)
	case err == nil && got.Compare(want) != 0:
		t.Errorf("Parse(%.80q) = %.200v, reference %.200v", data, got, want)
	case err == nil && got.Hash() != want.Hash():
		t.Errorf("Parse(%.80q): hash %d, reference hash %d", data, got.Hash(), want.Hash())
	}
}

func TestParseAgreesWithReference(t *testing.T) {
	for _, s := range corpus {
		check(t, []byte(s))
	}
}

// TestParseRandomDocuments checks random nested documents, and random
// one-byte corruptions of them, against the reference.
func TestParseRandomDocuments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(rng.IntN(2) == 0)
		if err := enc.Encode(randomValue(rng, 0)); err != nil {
			t.Fatal(err)
		}
		doc := buf.Bytes()
		check(t, doc)

		corrupt := bytes.Clone(doc)
		i := rng.IntN(len(corrupt))
		switch rng.IntN(3) {
		case 0:
			corrupt[i] = "{}[],:\"\\ 0-.eE\x00\xff"[rng.IntN(16)]
		case 1:
			corrupt = append(corrupt[:i], corrupt[i+1:]...)
		case 2:
			corrupt = append(corrupt[:i], append([]byte{byte(rng.IntN(256))}, corrupt[i:]...)...)
		}
		check(t, corrupt)
	}
}

func randomValue(rng *rand.Rand, depth int) any {
	kind := rng.IntN(8)
	if depth > 4 {
		kind %= 5
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return json.Number([]string{"0", "-1", "42", "3.25", "-0.5e-7", "1E+30", "123456789012345678901234567890"}[rng.IntN(7)])
	case 3, 4:
		return randomString(rng)
	case 5, 6:
		m := map[string]any{}
		for range rng.IntN(6) {
			m[randomString(rng)] = randomValue(rng, depth+1)
		}
		return m
	default:
		a := make([]any, rng.IntN(6))
		for i := range a {
			a[i] = randomValue(rng, depth+1)
		}
		return a
	}
}

func randomString(rng *rand.Rand) string {
	var sb strings.Builder
	for range rng.IntN(12) {
		sb.WriteRune([]rune{'a', 'Z', ' ', '"', '\\', '/', '\n', '\t', 0x01, 'é', '中', '😀', '<', '&', 0x2028, 0xFFFD}[rng.IntN(16)])
	}
	return sb.String()
}

func TestParseErrorsHaveOffsets(t *testing.T) {
	_, err := Parse([]byte(`{"a": [1, 2,, 3]}`))
	se, ok := err.(*SyntaxError)
	if !ok || se.Offset != 12 {
		t.Errorf("error = %#v, want a *SyntaxError at offset 12", err)
	}
}

func TestParsedValuesAreUsable(t *testing.T) {
	v, err := Parse([]byte(`{"b": [1, {"c": "x"}], "a": 2, "b": [3]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ast.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if string(b) != `{"a":2,"b":[3]}` {
		t.Errorf("round trip = %s", b)
	}
	if x, err := v.Find(ast.MustParseRef("data.b[0]")[1:]); err != nil || x.Compare(ast.Number("3")) != 0 {
		t.Errorf("Find = %v, %v", x, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range corpus {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { check(t, data) })
}

func BenchmarkParse(b *testing.B) {
	data := []byte(`{"action":"tools/call","principal":{"id":"alice","claims":{"team":"blue"},"transport":"stdio"},"server":{"name":"files","command":"/usr/bin/files","args":["--stdio"],"confinement":{"process_group":true,"pid_namespace":true,"parent_death_signal":true,"environment_inherited":false}},"tool":{"name":"files__read_file","upstream_name":"read_file","description":"does read_file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}},"annotations":{"readOnlyHint":true},"sha256":"abababababababababababababababababababababababababababababababab"},"arguments":{"path":"notes/today.md","max_bytes":4096},"request_id":"7","time":"2026-05-01T12:00:00.123456789Z"}`)
	b.Run("jsonast", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := reference(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
