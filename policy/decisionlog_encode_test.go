package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
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

// TestEventEncoderEqualsMarshal: the log's records, encoded by hand
// straight into the canonical form, are byte for byte (hash chain
// included) what json.Marshal followed by canonicalization gives, for
// events with every field populated: decisions, list events, repeated
// lists, errors, notes, the log's own labels and bundles and others.
func TestEventEncoderEqualsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	var direct, marshalled bytes.Buffer
	dw, mw := auditlog.NewWriter(&direct), auditlog.NewWriter(&marshalled)
	var labels map[string]string
	var bundles map[string]BundleRevision
	populate(r, reflect.ValueOf(&labels).Elem(), 0)
	populate(r, reflect.ValueOf(&bundles).Elem(), 0)
	enc := newEventEncoder(labels, bundles)
	for i := range 1000 {
		var ev Event
		populate(r, reflect.ValueOf(&ev).Elem(), 0)
		if i%3 == 0 {
			ev.Labels, ev.Bundles = labels, bundles
		}
		switch i % 5 {
		case 1: // a decision's own metrics, written without a map sort
			ev.Metrics = map[string]int64{timerDecision: r.Int64N(1 << 40), timerEval: -r.Int64N(1 << 40)}
		case 2:
			ev.Metrics = map[string]int64{timerDecision: 1, "cache_hits": 2}
		}
		switch i % 7 {
		case 0:
			var in Input
			populate(r, reflect.ValueOf(&in).Elem(), 0)
			var dec Decision
			populate(r, reflect.ValueOf(&dec).Elem(), 0)
			ev.Input, ev.Result = in, decisionResult(dec)
			if i%2 == 0 {
				ev.Result = dec.Result()
			} else if i%3 == 0 {
				dec.Extra = nil
				ev.Result = decisionResult(dec)
			}
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
			if i%2 == 0 {
				var dec Decision
				populate(r, reflect.ValueOf(&dec).Elem(), 0)
				if i%4 == 0 {
					dec.Extra = nil
				}
				ev.Result = (*decisionResult)(&dec)
			}
		case 3:
			var in listInput
			populate(r, reflect.ValueOf(&in).Elem(), 0)
			in.Tools, in.Resources, in.Prompts = nil, nil, nil
			var rep listRepeat
			populate(r, reflect.ValueOf(&rep).Elem(), 0)
			ev.Input, ev.Result = in, rep
		case 4:
			ev.Input, ev.Result, ev.Labels, ev.Metrics = (*Input)(nil), []listResult(nil), nil, nil
		case 5:
			var in Input // sparse: empty strings, nil maps and pointers
			in.Tool = &Tool{Name: "t"}
			ev.Input, ev.Result, ev.Error, ev.Custom, ev.Erased, ev.Bundles = in, decisionResult{}, nil, nil, nil, nil
		}
		b, err := json.Marshal(&ev)
		require.NoError(t, err)
		want, err := mw.Append(b)
		require.NoError(t, err)
		rec, err := enc.encode(nil, &ev)
		require.NoError(t, err)
		got, err := dw.AppendEncoded(rec)
		require.NoError(t, err)
		require.Equal(t, marshalled.String(), direct.String(), "event %d: %s", i, b)
		require.Equal(t, want, got)
	}
}

// BenchmarkEventEncoding compares, in one run, the two ways a record is
// made of a fully populated tools/call event: json.Marshal then
// canonicalization, and the log's way (encoded by hand into the canonical
// form in a reused buffer); both chain and write to io.Discard. `make
// bench-log` runs it.
func BenchmarkEventEncoding(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var in Input
	populate(r, reflect.ValueOf(&in).Elem(), 0)
	l := NewDecisionLog(io.Discard, DecisionLogOptions{Labels: map[string]string{"id": "bench", "version": "bench"},
		Revision: "be86e65e46b887d5a425f46c874edb52cb4d7338a3b7242e9e0b2afcc2b8d720"})
	ev := l.baseEvent(697861, 697671)
	ev.DecisionID, ev.Timestamp = newUUID(), "2026-11-22T02:48:03.094675252Z"
	ev.Input, ev.Result = in, decisionResult{Allow: true, Reason: "tool exposed by data.warden.servers and not denied"}
	ev.Erased = []string{"/input/arguments"}
	b.Run("marshal+canonicalize", func(b *testing.B) {
		w := auditlog.NewWriter(io.Discard)
		b.ReportAllocs()
		for range b.N {
			buf, err := json.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.Append(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := l.append(context.Background(), ev, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListEventEncoding is the log's part of a tools/list of 1,000
// tools logged in full (a cold list, or one that changed): building the
// event, encoding and chaining it, written to io.Discard. `make bench-log`
// runs it.
func BenchmarkListEventEncoding(b *testing.B) {
	l := NewDecisionLog(io.Discard, DecisionLogOptions{Labels: map[string]string{"id": "bench", "version": "bench"},
		Revision: "be86e65e46b887d5a425f46c874edb52cb4d7338a3b7242e9e0b2afcc2b8d720"})
	inputs := make([]Input, 1000)
	decisions := make([]Decision, len(inputs))
	errs := make([]error, len(inputs))
	for i := range inputs {
		name := fmt.Sprintf("tool_%d", i)
		inputs[i] = Input{Action: ActionToolsList, Principal: Principal{ID: "alice", Transport: "stdio", AuthMethod: "none"},
			Server: Server{Name: "files", Command: "/usr/bin/files-server", Confinement: Confinement{ProcessGroup: true, Level: "strong"}},
			Tool: &Tool{Name: "files__" + name, UpstreamName: name, Description: "Tool number " + name + " of the benchmark server.",
				InputSchema: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
				SHA256:      strings.Repeat("0", 64)},
			Time: "2026-11-22T02:48:03.093962263Z", RequestID: "1"}
		decisions[i] = Decision{Allow: i%3 == 0, Reason: "tool exposed by data.warden.servers and not denied"}
	}
	rec, err := l.enc.encode(nil, l.newListEvent(inputs, decisions, errs, 1000, 1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(rec.Canonical)), "record_bytes")
	b.ReportAllocs()
	for range b.N {
		ev := l.newListEvent(inputs, decisions, errs, 1000, 1000)
		if _, err := l.append(context.Background(), ev, 0); err != nil {
			b.Fatal(err)
		}
	}
}
