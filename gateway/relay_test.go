package gateway

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSSEBodyMarksTheRequestsOfItsCall: the SSE response of a call passes
// byte for byte, however it is cut, except that the server's requests on
// it carry the call's id under the stream key, beside the _meta they had;
// relayed notifications are counted; a stream of no call is not marked.
func TestSSEBodyMarksTheRequestsOfItsCall(t *testing.T) {
	const key = "mcp-warden.stream.K"
	stream := "event: message\r\nid: 1\r\n" +
		`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}` + "\r\n\r\n" +
		`data: {"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"_meta":{"x":1},"message":"ok? <yes>","requestedSchema":{"type":"object"}}}` + "\n\n" +
		`data: {"jsonrpc":"2.0","id":8,"method":"roots/list"}` + "\r\r" +
		`data: {"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"9007199254740993"}]}}` + "\n\n" +
		": a comment\n" + "data: not json"

	read := func(call string) (string, *relayedCounter) {
		relayed := &relayedCounter{}
		body := &sseBody{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))), relayed: relayed, key: key, call: call}
		out, err := io.ReadAll(iotest.HalfReader(body))
		require.NoError(t, err)
		return string(out), relayed
	}

	unmarked, relayed := read("")
	assert.Equal(t, stream, unmarked)
	assert.Equal(t, 1, relayed.n)

	marked, relayed := read("mcp-warden-42")
	assert.Equal(t, 1, relayed.n)
	lines := strings.FieldsFunc(marked, func(r rune) bool { return r == '\r' || r == '\n' })
	require.Len(t, lines, 8)
	params := func(line string) map[string]any {
		var msg struct{ Params map[string]any }
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &msg))
		return msg.Params
	}
	elicit := params(lines[3])
	assert.Equal(t, map[string]any{key: "mcp-warden-42", "x": float64(1)}, elicit["_meta"])
	assert.Equal(t, "ok? <yes>", elicit["message"])
	assert.Equal(t, map[string]any{"_meta": map[string]any{key: "mcp-warden-42"}}, params(lines[4]))
	// Everything but the two requests passes as it came.
	for _, i := range []int{3, 4} {
		lines[i] = ""
	}
	for _, line := range lines {
		if line != "" {
			assert.Contains(t, stream, line)
		}
	}
	assert.Contains(t, marked, "\"9007199254740993\"}]}}\n\n: a comment\ndata: not json")
}
