package rego_test

import (
	"context"
	"fmt"
	"log"

	"github.com/mcp-warden/mcp-warden/rego"
)

// The gateway prepares the entry point once, with the allow and block lists
// of its config as data.warden.servers, then evaluates every decision's
// JSON input on the prepared query.
func ExamplePrepare() {
	ctx := context.Background()
	servers := map[string]any{"warden": map[string]any{"servers": map[string]any{
		"demo": map[string][]string{"allow": {"*"}, "block": {"reset_notes"}},
	}}}
	q, err := rego.Prepare(ctx, rego.Demo(), "data.mcp.warden.decision", servers)
	if err != nil {
		log.Fatal(err)
	}
	for _, input := range []string{
		`{"action": "tools/call", "server": {"name": "demo"}, "tool": {"upstream_name": "echo"}, "arguments": {"message": "hi"}}`,
		`{"action": "tools/call", "server": {"name": "demo"}, "tool": {"upstream_name": "reset_notes"}}`,
		`{"action": "tools/call", "server": {"name": "demo"}, "tool": {"upstream_name": "read_note"}, "arguments": {"name": "private/diary"}}`,
	} {
		decision, _, err := q.Eval(ctx, []byte(input))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(decision)
	}
	// Output:
	// map[allow:true reason:tool exposed by data.warden.servers and not denied]
	// map[allow:false hidden:true reason:unknown tool]
	// map[allow:false reason:notes under private/ and paths with .. are not readable through the gateway]
}

// Test runs Rego unit tests as `opa test` does.
func ExampleTest() {
	passed, failed, err := rego.Test(context.Background(), []string{"library", "demo"}, nil, false)
	fmt.Println(passed, failed, err)
	// Output: 48 0 <nil>
}
