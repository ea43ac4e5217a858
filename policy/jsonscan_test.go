package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filterFields is the tree the filter tests reduce documents to: the
// default library's paths, and one member read whole.
var filterFields = newInputFields([][]string{
	{"action"}, {"server", "name"}, {"tool", "upstream_name"}, {"resource", "uri"}, {"principal", "claims"},
}, false)

func TestFilterJSONKeepsOnlyWhatThePolicyReads(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"action":"tools/call","arguments":{"path":"x"},"server":{"name":"files","command":"c","confinement":{"level":"strong"}},"tool":{"name":"f__r","upstream_name":"r","input_schema":{"type":"object"}}}`,
			`{"action":"tools/call","server":{"name":"files"},"tool":{"upstream_name":"r"}}`},
		// Read whole: copied as it is, members nobody names included.
		{`{"principal":{"id":"a","claims":{"groups":["x"],"n":1.50e3}}}`, `{"principal":{"claims":{"groups":["x"],"n":1.50e3}}}`},
		// Not an object where one is walked into: kept as it is, since a
		// policy may test its type.
		{`{"tool":"not an object","server":[1,{"name":2}]}`, `{"tool":"not an object","server":[1,{"name":2}]}`},
		// Escaped member names are matched by what they say, and copied
		// as written; duplicates are kept in order for the parser to
		// resolve as it would have.
		{`{"\u0061ction":"a","action":"b","act\"ion":1}`, `{"\u0061ction":"a","action":"b"}`},
		{` { } `, `{}`},
		{`{"x":1}`, `{}`},
		{`[{"action":1}]`, `[{"action":1}]`},
		{`"a string"`, `"a string"`},
		{"\t{\"action\" : \"x\" ,\n \"y\" : [ ] }\n", `{"action":"x"}`},
	} {
		got, err := filterFields.filterJSON(nil, []byte(tc.in))
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, string(got), tc.in)
	}
	whole, err := inputFields(nil).filterJSON(nil, []byte(` {"a":1} `))
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(whole), "the nil tree copies the whole value")
}

// A document that is not one JSON value is refused, even where the broken
// part is one the filter drops.
func TestFilterJSONRefusesWhatIsNotJSON(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `{"action":"x"`, `{"action":"x",}`, `{"arguments":{"a":01}}`, `{"arguments":[1,]}`,
		`{"arguments":"\x"}`, `{"arguments":"\u12"}`, "{\"arguments\":\"a\x01\"}", `{"arguments":tru}`,
		`{"action":"x"} {}`, `{"arguments":{"a" 1}}`, `{"arguments":{1:2}}`, `{"arguments":-}`, `{"arguments":1.}`,
		`{"arguments":1e}`, `{"arguments":[}`, `{"arguments":{]}`, `{action:1}`, `{"action"}`, `{"arguments":NaN}`,
	} {
		_, err := filterFields.filterJSON(nil, []byte(in))
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), "input is not valid JSON", "%q", in)
		assert.False(t, json.Valid([]byte(in)), "the case %q is valid JSON", in)
	}
}

// FuzzFilterJSON checks the filter against encoding/json: it accepts
// exactly the valid documents, and the reduced document decodes to the
// whole document's decoding reduced to the same members.
func FuzzFilterJSON(f *testing.F) {
	for _, seed := range []string{
		`{"action":"tools/call","server":{"name":"files","x":[1,2,{"y":null}]},"tool":{"upstream_name":"r"}}`,
		`{"principal":{"claims":{"a":[true,false,-0.5e-3]}},"tool":"s","resource":{"uri":"\ud83d\ude00"}}`,
		`{"\u0061ction":1,"action":2}`, `[1]`, `{"a":"\\\"\/\b\f\n\r\t"}`, `{`, `{"a":01}`, ` null `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, err := filterFields.filterJSON(nil, src)
		if !json.Valid(src) {
			require.Error(t, err, "%q is not valid JSON", src)
			return
		}
		require.NoError(t, err, "%q", src)
		var whole, reduced any
		require.NoError(t, json.Unmarshal(src, &whole))
		require.NoError(t, json.Unmarshal(got, &reduced), "filtered %q of %q", got, src)
		assert.Equal(t, reduceDecoded(filterFields, whole), reduced, "%q filtered to %q", src, got)
		assert.False(t, len(bytes.TrimSpace(got)) > len(bytes.TrimSpace(src)), "the filter added bytes")
	})
}

// reduceDecoded is filterJSON on a decoded document.
func reduceDecoded(fs inputFields, v any) any {
	obj, ok := v.(map[string]any)
	if fs == nil || !ok {
		return v
	}
	out := map[string]any{}
	for k, e := range obj {
		if sub, read := fs[k]; read {
			out[k] = reduceDecoded(sub, e)
		}
	}
	return out
}

// FuzzDecodeJSON checks decodeJSON against encoding/json's Decoder with
// UseNumber: the same value, or both an error.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		`{"allow":true,"reason":"x","extra":{"n":[1,-2.5e3,0],"s":"\u00e9\n","z":null,"b":false}}`,
		`{"reason":"tool \"a\" \\ \/ \b\f\n\r\t x \u0041\ud83d\ude00"}`, `[]`, `{}`, `"caf\xc3\xa9"`, "\"\xff\"", `{"a":1,"a":2}`, `1 2`, `{"a":}`, `-0`, ` [ 1 , {"":""} ] `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, err := decodeJSON(src)
		dec := json.NewDecoder(bytes.NewReader(src))
		dec.UseNumber()
		var want any
		wantErr := dec.Decode(&want)
		if wantErr == nil && dec.More() || wantErr == nil && !json.Valid(src) {
			wantErr = errors.New("trailing data")
		}
		if wantErr != nil {
			require.Error(t, err, "%q", src)
			return
		}
		require.NoError(t, err, "%q", src)
		assert.Equal(t, want, got, "%q", src)
	})
}
