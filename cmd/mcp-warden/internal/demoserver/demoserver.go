// Package demoserver is the small MCP server behind `mcp-warden serve --demo`
// (run as `mcp-warden demo-server`): a few harmless tools that let the demo
// policy show allowed, denied and hidden calls. The server applies no policy
// of its own; denying "private/" and ".." notes and hiding reset_notes is the
// gateway's job.
package demoserver

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Name is the server name the demo server reports in its serverInfo.
const Name = "mcp-warden-demo"

// Run serves one MCP session over newline-delimited JSON-RPC, reading
// requests from in and writing responses to out, until in reaches EOF or ctx
// is cancelled. If in is an io.Closer, Run closes it when it returns, which
// is what unblocks a pending read; out is never closed. Each call to Run
// starts with a fresh set of seeded notes.
func Run(ctx context.Context, in io.Reader, out io.Writer) error {
	rc, ok := in.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(in)
	}
	err := newServer().Run(ctx, &mcp.IOTransport{Reader: rc, Writer: nopWriteCloser{out}})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("demo server: %w", err)
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func newServer() *mcp.Server {
	n := &notes{byName: seedNotes()}
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "mcp-warden demo server", Version: "v1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "echo",
		Description: "Returns the message it is given.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, echo)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "add",
		Description: "Adds two numbers; the sum comes as text and as structured content.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, add)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "read_note",
		Description: `Returns the text of a note by name, e.g. "welcome" or "todo".`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, n.read)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "reset_notes",
		Description: "Deletes every note.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(false)},
	}, n.reset)
	return s
}

// EchoInput is the input of the echo tool.
type EchoInput struct {
	Message string `json:"message" jsonschema:"the text to send back"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in EchoInput) (*mcp.CallToolResult, any, error) {
	return textResult(in.Message), nil, nil
}

// AddInput is the input of the add tool.
type AddInput struct {
	A float64 `json:"a" jsonschema:"the first addend"`
	B float64 `json:"b" jsonschema:"the second addend"`
}

// AddOutput is the structured result of the add tool.
type AddOutput struct {
	Sum float64 `json:"sum" jsonschema:"a + b"`
}

func add(_ context.Context, _ *mcp.CallToolRequest, in AddInput) (*mcp.CallToolResult, AddOutput, error) {
	sum := in.A + in.B
	return textResult(strconv.FormatFloat(sum, 'g', -1, 64)), AddOutput{Sum: sum}, nil
}

// ReadNoteInput is the input of the read_note tool.
type ReadNoteInput struct {
	Name string `json:"name" jsonschema:"the note's name, e.g. welcome"`
}

// notes is the in-memory note store of one server; tool calls may run concurrently.
type notes struct {
	mu     sync.Mutex
	byName map[string]string
}

func seedNotes() map[string]string {
	return map[string]string{
		"welcome":       "Welcome to the mcp-warden demo. Every tool call you make passes the gateway's policy first.",
		"todo":          "1. Read the welcome note.\n2. Try to read private/diary and see the policy deny it.",
		"private/diary": "Dear diary, today the gateway let this through. It should not have.",
	}
}

func (n *notes) read(_ context.Context, _ *mcp.CallToolRequest, in ReadNoteInput) (*mcp.CallToolResult, any, error) {
	n.mu.Lock()
	text, ok := n.byName[in.Name]
	n.mu.Unlock()
	if !ok {
		// A tool error (isError), not a protocol error. It names no other note,
		// so an allowed call cannot list the ones the policy keeps private.
		return nil, nil, fmt.Errorf("no note named %q", in.Name)
	}
	return textResult(text), nil, nil
}

func (n *notes) reset(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	n.mu.Lock()
	count := len(n.byName)
	clear(n.byName)
	n.mu.Unlock()
	return textResult(fmt.Sprintf("deleted %d notes", count)), nil, nil
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
