package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// A list's event holds all of each item's input: a replay rebuilds every
// field of every item (populated by reflection, so a field added to Input
// later is covered), from the logged line alone.
func TestListEventRebuildsEveryItemInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, action := range []Action{ActionToolsList, ActionResourcesList, ActionPromptsList} {
		var head Input
		populate(r, reflect.ValueOf(&head).Elem(), 0)
		inputs := make([]Input, 3)
		for i := range inputs {
			populate(r, reflect.ValueOf(&inputs[i]).Elem(), 0)
			inputs[i].Action, inputs[i].Principal, inputs[i].RequestID, inputs[i].SessionID, inputs[i].Time =
				action, head.Principal, head.RequestID, head.SessionID, head.Time
			inputs[i].Arguments = nil // a list decision has none
		}
		var buf bytes.Buffer
		l := NewDecisionLog(&buf, DecisionLogOptions{})
		ev := l.newListEvent(inputs, make([]Decision, 3), make([]error, 3), 0, 0)
		_, err := l.write(context.Background(), ev, 0)
		require.NoError(t, err)

		var logged loggedEvent
		require.NoError(t, json.Unmarshal(buf.Bytes(), &logged))
		var li listInput
		require.NoError(t, decodeUseNumber(logged.Input, &li))
		want, err := json.Marshal(inputs)
		require.NoError(t, err)
		got, err := json.Marshal(li.items())
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got), "%s", action)
	}
}
