package policy

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newUUID() string {
	var u [16]byte
	randomUUID(&u)
	return string(appendUUID(nil, &u))
}

func (s *uuidSource) next() string {
	var u [16]byte
	s.fill(&u)
	return string(appendUUID(nil, &u))
}

// TestDecisionIDsAndTimestamps: decision ids are distinct version 4
// UUIDs; timestamps are time.RFC3339Nano in UTC exactly.
func TestDecisionIDsAndTimestamps(t *testing.T) {
	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newUUIDSource(), newUUIDSource()
	seen := map[string]bool{}
	for range 5000 {
		for _, id := range []string{a.next(), b.next(), newUUID()} {
			require.Regexp(t, v4, id)
			require.False(t, seen[id], "ids never repeat, across sources too")
			seen[id] = true
		}
	}

	var clock timestampClock
	r := rand.New(rand.NewPCG(1, 1))
	local := time.FixedZone("x", -7*3600)
	times := []time.Time{time.Unix(0, 0), time.Unix(1, 1), time.Unix(1, 100), time.Unix(1, 120_000_000),
		time.Date(1, 1, 1, 0, 0, 0, 999_999_999, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 500, local), time.Now()}
	for range 2000 {
		times = append(times, time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).In(local))
		times = append(times, times[len(times)-1].Add(time.Duration(r.Int64N(3e9)))) // often the same second
	}
	for _, tm := range times {
		require.Equal(t, tm.UTC().Format(time.RFC3339Nano), string(clock.appendFormat([]byte("x"), tm)[1:]))
	}
}

// TestReusedEventsCarryNothingOver: a decision's event is built in a
// reused object; nothing of one decision (error, erased arguments, input,
// id) appears in the next one's record.
func TestReusedEventsCarryNothingOver(t *testing.T) {
	var buf bytes.Buffer
	l := NewDecisionLog(&buf, DecisionLogOptions{})
	ctx := context.Background()
	failed := Input{Action: ActionToolsCall, Server: memoServer(), Tool: memoTool(), Arguments: map[string]any{"path": "x"}, Time: "t1"}
	require.NoError(t, l.logDecision(ctx, &failed, Decision{Reason: "no", Hidden: true, Extra: map[string]any{"why": 1}},
		errors.New("boom"), false, time.Now(), time.Millisecond))
	plain := Input{Action: ActionPromptsGet, Server: Server{Name: "other"}, Prompt: &Prompt{Name: "p"}, Time: "t2"}
	require.NoError(t, l.logDecision(ctx, &plain, Decision{Allow: true}, nil, false, time.Now(), time.Microsecond))

	recs := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, recs, 2)
	for _, s := range []string{`"error"`, `"erased"`, `"boom"`, `"tool"`, `"hidden"`, `"why"`, `"t1"`, `"files"`} {
		assert.Contains(t, string(recs[0]), s)
		assert.NotContains(t, string(recs[1]), s, "the second record carries nothing of the first")
	}
	assert.Contains(t, string(recs[1]), `"metrics":{"timer_mcp_warden_decision_ns":1000,"timer_rego_query_eval_ns":1000}`)
	assert.Contains(t, string(recs[1]), `"req_id":2`)
	assert.NotEqual(t, recs[0][:60], recs[1][:60])
}
