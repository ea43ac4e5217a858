package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

func ExampleSpawn() {
	// In main: sandbox.Init() as the very first statement.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sandbox.Spawn(ctx, sandbox.Spec{
		Name:    "echo",
		Command: "cat",
		Env:     map[string]string{"API_TOKEN": "declared secret"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	fmt.Fprintln(p.Stdin(), `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
	fmt.Print(line)
	// Output: {"jsonrpc":"2.0","id":1,"method":"ping"}
}

func ExamplePool() {
	// One pool for the life of the program; servers started through it
	// find an init already waiting. Close ends the waiting inits.
	pool := sandbox.NewPool()
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pool.Spawn(ctx, sandbox.Spec{
		Name:    "hello",
		Command: "echo",
		Args:    []string{"hello from a pooled init"},
		// Each egress decision of the server's proxy, for the operator's log.
		EgressLog: func(d sandbox.EgressDecision) { fmt.Println(d.Host, d.Allowed, d.Reason) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	line, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
	fmt.Print(line)
	// Output: hello from a pooled init
}
