package policy

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// populate sets every exported field reachable from v (a pointer) to a
// value of its type, so that a field added later is covered too.
func populate(r *rand.Rand, v reflect.Value, depth int) {
	strs := []string{"alice", "é\"\\\n<&>\u2028", "日本 😀", "", "\x01ctl", "hash"}
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		populate(r, v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				populate(r, v.Field(i), depth+1)
			}
		}
	case reflect.String:
		v.SetString(strs[r.IntN(len(strs))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(r.Int64N(1<<40) - 1<<39)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(r.Uint64N(1 << 40))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(r.NormFloat64() * 1e6)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf(map[string]any{"b": []any{1.5, "x", nil, true}, "a": json.Number("1.50"), strs[r.IntN(len(strs))]: 2.0e-9}))
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"z": 1, "a": [1.50]}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			populate(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			populate(r, k, depth+1)
			populate(r, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	}
}

// TestDirectCanonicalEncodingEqualsMarshalPath: the log's records, encoded
// straight into the canonical form, are byte for byte (hash chain
// included) what json.Marshal followed by canonicalization gives, for
// events with every field populated: decisions, list events, errors, notes.
func TestDirectCanonicalEncodingEqualsMarshalPath(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	var direct, marshalled bytes.Buffer
	dw, mw := auditlog.NewWriter(&direct), auditlog.NewWriter(&marshalled)
	for i := range 500 {
		var ev Event
		populate(r, reflect.ValueOf(&ev).Elem(), 0)
		switch i % 4 {
		case 0:
			var in Input
			populate(r, reflect.ValueOf(&in).Elem(), 0)
			var dec Decision
			populate(r, reflect.ValueOf(&dec).Elem(), 0)
			ev.Input, ev.Result = in, dec
		case 1:
			var in listInput
			populate(r, reflect.ValueOf(&in).Elem(), 0)
			var res []listResult
			populate(r, reflect.ValueOf(&res).Elem(), 0)
			ev.Input, ev.Result = in, res
		case 2:
			var in Input
			populate(r, reflect.ValueOf(&in).Elem(), 0)
			ev.Input, ev.Result = &in, nil
		}
		b, err := json.Marshal(&ev)
		require.NoError(t, err)
		require.NoError(t, mw.Append(b))
		require.NoError(t, dw.AppendValue(&ev, nil))
		require.Equal(t, marshalled.String(), direct.String(), "event %d: %s", i, b)
	}
}

// BenchmarkEventEncoding compares, in one run, the two ways a record is
// made of a fully populated tools/call event: json.Marshal then
// canonicalization (the way before), and the direct canonical encoding
// the log uses; both chain and write to io.Discard. `make bench-log` runs it.
func BenchmarkEventEncoding(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var in Input
	populate(r, reflect.ValueOf(&in).Elem(), 0)
	ev := &Event{Labels: map[string]string{"id": "bench", "version": "bench"}, DecisionID: newUUID(), Path: "mcp/warden/decision",
		Bundles: map[string]BundleRevision{"mcp-warden": {Revision: "be86e65e46b887d5a425f46c874edb52cb4d7338a3b7242e9e0b2afcc2b8d720"}},
		Input:   in, Result: Decision{Allow: true, Reason: "tool exposed by data.warden.servers and not denied"}, RequestID: 1,
		Timestamp: "2026-11-22T02:48:03.094675252Z", Metrics: map[string]int64{"timer_mcp_warden_decision_ns": 697861, "timer_rego_query_eval_ns": 697671},
		Erased: []string{"/input/arguments"}}
	b.Run("marshal+canonicalize", func(b *testing.B) {
		w := auditlog.NewWriter(io.Discard)
		b.ReportAllocs()
		for range b.N {
			buf, err := json.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Append(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		w := auditlog.NewWriter(io.Discard)
		b.ReportAllocs()
		for range b.N {
			if err := w.AppendValue(ev, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
