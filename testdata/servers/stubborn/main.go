// Command stubborn is an MCP stdio server that is hard to get rid of, for
// tests proving that stopping a server leaves no process behind.
//
// At start it re-executes itself with -grandchild; that child (in the same
// process group and session, with stdin, stdout and stderr on /dev/null)
// ignores SIGTERM and sleeps forever. The server itself ignores SIGTERM too
// and, once both do, writes one line "pid=<own pid> grandchild=<child pid>"
// to stderr. It serves one tool, ping → "pong", and when stdin closes it
// stays alive: only SIGKILL (of both processes) ends it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/gateway"
)

func main() {
	grandchild := flag.Bool("grandchild", false, "run as the grandchild: ignore SIGTERM and sleep forever")
	flag.Parse()
	// SIGPIPE too: a reader closing stderr must not end it either.
	signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE)
	if *grandchild {
		os.NewFile(3, "ready").Close() // tells the parent SIGTERM is ignored now
		sleepForever()
	}

	self, err := os.Executable()
	if err != nil {
		log.Fatalf("stubborn: %v", err)
	}
	// A SIGTERM that arrived before the child reached signal.Ignore would
	// kill it: report the pid only once the child closes its end of ready.
	ready, readyW, err := os.Pipe()
	if err != nil {
		log.Fatalf("stubborn: %v", err)
	}
	child := exec.Command(self, "-grandchild")
	child.ExtraFiles = []*os.File{readyW}
	if err := child.Start(); err != nil {
		log.Fatalf("stubborn: start grandchild: %v", err)
	}
	readyW.Close()
	if _, err := ready.Read(make([]byte, 1)); err != io.EOF {
		log.Fatalf("stubborn: wait for grandchild: %v", err)
	}
	ready.Close()
	fmt.Fprintf(os.Stderr, "pid=%d grandchild=%d\n", os.Getpid(), child.Process.Pid)

	server := mcp.NewServer(&mcp.Implementation{Name: "stubborn", Version: "v0.0.1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "ping", Description: "Answers pong."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
	err = server.Run(context.Background(), gateway.StdioTransport())
	fmt.Fprintf(os.Stderr, "stubborn: stdin closed (%v); staying alive\n", err)
	sleepForever()
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}
