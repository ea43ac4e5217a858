// Command asker is an MCP server of the 2025-11-25 era only (it
// refuses server/discover, as the official TypeScript servers do; see
// -modern) that asks
// its client for input while serving a call, for tests of the gateway's
// bridging of such requests to 2026-07-28 clients (input_required results):
//
//   - confirm {"question"}: sends elicitation/create (a form asking for a
//     boolean "ok") and answers "<action> ok=<value>", or "error: <error>".
//   - twice: elicits "first?" then "second?" and answers with both actions.
//   - sample {"prompt"}: sends sampling/createMessage and answers
//     "<model>: <text>".
//   - roots: sends roots/list and answers with the root URIs, one per line.
//   - roots_changes: answers with how many notifications/roots/list_changed
//     it has received.
//   - progress {"tag", "ask"}: notifies "before", elicits "go on?" (or,
//     with ask "sample", samples "go on?"), and notifies "after" once
//     answered; 300ms into the wait it notifies "while waiting", pings the
//     client (so that the client has read the notification) and writes
//     "progress sent while waiting" to stderr. It answers as confirm (or
//     sample) does. To notify is to send, in this order, progress (with a
//     progress token; message "<tag> <phase>", or "<phase>" without a tag),
//     a log message of level info with data "<tag> <phase>" and one of
//     level debug with data "<tag> <phase> (debug)" (logger "asker").
//   - note {"text", "together", "aside"}: waits until `together` note calls
//     are in flight at once, sends the log message text (level info, logger
//     "asker") on its call, waits until each of them has sent its own, and
//     answers "noted". So every log message is sent while all those calls
//     are in flight. With aside, the message is sent outside any call (over
//     streamable HTTP: on the standalone GET stream) and followed by a ping
//     on the same stream, so that the client has read it before the call
//     answers.
//   - hold {"text"}: sends the log message text (level info, logger
//     "asker") on its call and stays in flight until it is cancelled,
//     which writes "hold cancelled" to stderr: a call in flight on this
//     process for as long as its client wants, in either era.
//
// The prompt approval {"question"} elicits its question and answers with
// one user message "<action> ok=<value>"; the resource asker://secret
// elicits "reveal the secret?" and reads "secret: <action> ok=<value>".
//
// With -http ADDRESS it serves streamable HTTP (stateful, 2025-11-25)
// there instead of stdio; with -sse ADDRESS it serves the deprecated
// HTTP+SSE transport there. With -modern it also speaks 2026-07-28 (it
// answers server/discover) and serves HTTP statelessly, as the go-sdk
// serves that era only so: its requests for input then fail in either era
// (a stateless server cannot send requests), but note's log messages,
// sent on the response stream of their call, go through in both.
//
// A request cancelled while it waits for the client writes "<tool, prompt
// or resource> cancelled" to stderr; every
// notifications/roots/list_changed writes "roots changed".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/gateway"
)

var object = json.RawMessage(`{"type":"object"}`)

func done(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// failed answers a call whose request to the client failed, and notes a
// cancellation of the call on stderr.
func failed(ctx context.Context, tool string, err error) *mcp.CallToolResult {
	noteCancelled(ctx, tool)
	return done("error: " + err.Error())
}

// noteCancelled writes "<name> cancelled" to stderr when the request is
// cancelled, which may reach the server just after the failed request's
// answer.
func noteCancelled(ctx context.Context, name string) {
	select {
	case <-ctx.Done():
		log.Printf("%s cancelled", name)
	case <-time.After(500 * time.Millisecond):
	}
}

func argument(req *mcp.CallToolRequest, name string) string {
	var args map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &args)
	s, _ := args[name].(string)
	return s
}

func confirm(ctx context.Context, ss *mcp.ServerSession, question string) (string, error) {
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: question, RequestedSchema: map[string]any{
		"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}},
	}})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s ok=%v", res.Action, res.Content["ok"]), nil
}

// sample asks the client to sample prompt and answers "<model>: <text>".
func sample(ctx context.Context, ss *mcp.ServerSession, prompt string) (string, error) {
	res, err := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 50, Messages: []*mcp.SamplingMessage{
		{Role: "user", Content: &mcp.TextContent{Text: prompt}},
	}})
	if err != nil {
		return "", err
	}
	text, _ := res.Content.(*mcp.TextContent)
	if text == nil {
		return res.Model + ": (no text)", nil
	}
	return res.Model + ": " + text.Text, nil
}

// meeting holds calls until a number of them have come.
type meeting struct {
	mu   sync.Mutex
	n    int
	here chan struct{} // closed when the calls waiting now are all here
}

// meet waits until of calls (counting this one) are waiting, or ctx ends.
func (m *meeting) meet(ctx context.Context, of int) error {
	m.mu.Lock()
	if m.here == nil {
		m.here = make(chan struct{})
	}
	here := m.here
	if m.n++; m.n >= of {
		close(here)
		m.here, m.n = nil, 0
	}
	m.mu.Unlock()
	select {
	case <-here:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		if m.here == here {
			m.n--
		}
		m.mu.Unlock()
		return ctx.Err()
	}
}

func main() {
	addr := flag.String("http", "", "serve streamable HTTP (2025-11-25) at `address` instead of stdio")
	sseAddr := flag.String("sse", "", "serve the deprecated HTTP+SSE transport at `address` instead of stdio")
	modern := flag.Bool("modern", false, "speak 2026-07-28 too (HTTP: statelessly)")
	flag.Parse()
	log.SetFlags(0)
	var rootsChanges atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Prompts: &mcp.PromptCapabilities{},
			Resources: &mcp.ResourceCapabilities{}, Logging: &mcp.LoggingCapabilities{}},
		RootsListChangedHandler: func(context.Context, *mcp.RootsListChangedRequest) {
			rootsChanges.Add(1)
			log.Printf("roots changed")
		},
	})
	// Only the legacy era, unless -modern: the gateway's 2026-07-28 probe
	// must fail.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "server/discover" && !*modern {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
			}
			return next(ctx, method, req)
		}
	})
	s.AddTool(&mcp.Tool{Name: "confirm", InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			answer, err := confirm(ctx, req.Session, argument(req, "question"))
			if err != nil {
				return failed(ctx, "confirm", err), nil
			}
			return done(answer), nil
		})
	s.AddTool(&mcp.Tool{Name: "twice", InputSchema: object}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var answers []string
		for _, q := range []string{"first?", "second?"} {
			answer, err := confirm(ctx, req.Session, q)
			if err != nil {
				return failed(ctx, "twice", err), nil
			}
			answers = append(answers, answer)
		}
		return done(strings.Join(answers, "; ")), nil
	})
	s.AddTool(&mcp.Tool{Name: "sample", InputSchema: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			answer, err := sample(ctx, req.Session, argument(req, "prompt"))
			if err != nil {
				return failed(ctx, "sample", err), nil
			}
			return done(answer), nil
		})
	s.AddTool(&mcp.Tool{Name: "roots", InputSchema: object}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return failed(ctx, "roots", err), nil
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return done(strings.Join(uris, "\n")), nil
	})
	s.AddTool(&mcp.Tool{Name: "roots_changes", InputSchema: object}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return done(fmt.Sprint(rootsChanges.Load())), nil
	})
	s.AddTool(&mcp.Tool{Name: "progress", InputSchema: json.RawMessage(`{"type":"object","properties":{"tag":{"type":"string"},"ask":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			token := req.Params.GetProgressToken()
			tag := argument(req, "tag")
			notify := func(progress float64, phase string) {
				msg := strings.TrimSpace(tag + " " + phase)
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: progress, Message: msg})
				}
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "asker", Data: msg})
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Logger: "asker", Data: msg + " (debug)"})
			}
			notify(1, "before")
			answered := make(chan struct{})
			waited := make(chan struct{})
			go func() {
				defer close(waited)
				select {
				case <-time.After(300 * time.Millisecond):
					notify(2, "while waiting")
					_ = req.Session.Ping(ctx, nil)
					log.Printf("progress sent while waiting")
				case <-answered:
				}
			}()
			var answer string
			var err error
			if argument(req, "ask") == "sample" {
				answer, err = sample(ctx, req.Session, "go on?")
			} else {
				answer, err = confirm(ctx, req.Session, "go on?")
			}
			close(answered)
			<-waited
			if err != nil {
				return failed(ctx, "progress", err), nil
			}
			notify(3, "after")
			return done(answer), nil
		})
	var inFlight, logged meeting
	s.AddTool(&mcp.Tool{Name: "note", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"together":{"type":"integer"},"aside":{"type":"boolean"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Text     string
				Together int
				Aside    bool
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if err := inFlight.meet(ctx, args.Together); err != nil {
				return failed(ctx, "note", err), nil
			}
			on := ctx
			if args.Aside { // no request's context: the SDK sends it on no call's stream
				var cancel context.CancelFunc
				on, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
			}
			if err := req.Session.Log(on, &mcp.LoggingMessageParams{Level: "info", Logger: "asker", Data: args.Text}); err != nil {
				return done("error: " + err.Error()), nil
			}
			if args.Aside {
				if err := req.Session.Ping(on, nil); err != nil {
					return done("error: " + err.Error()), nil
				}
			}
			if err := logged.meet(ctx, args.Together); err != nil {
				return failed(ctx, "note", err), nil
			}
			return done("noted"), nil
		})
	s.AddTool(&mcp.Tool{Name: "hold", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "asker", Data: argument(req, "text")}); err != nil {
				return done("error: " + err.Error()), nil
			}
			<-ctx.Done()
			log.Printf("hold cancelled")
			return nil, ctx.Err()
		})
	s.AddPrompt(&mcp.Prompt{Name: "approval", Arguments: []*mcp.PromptArgument{{Name: "question"}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			answer, err := confirm(ctx, req.Session, req.Params.Arguments["question"])
			if err != nil {
				noteCancelled(ctx, "approval")
				return nil, err
			}
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: answer}}}}, nil
		})
	s.AddResource(&mcp.Resource{Name: "secret", URI: "asker://secret", MIMEType: "text/plain"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			answer, err := confirm(ctx, req.Session, "reveal the secret?")
			if err != nil {
				noteCancelled(ctx, "secret")
				return nil, err
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "secret: " + answer}}}, nil
		})
	if *sseAddr != "" {
		log.Fatal(http.ListenAndServe(*sseAddr, mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)))
	}
	if *addr != "" {
		// Stateful (unless -modern): sessions, and requests to the client
		// on the stream of the call they serve.
		log.Fatal(http.ListenAndServe(*addr, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: *modern})))
	}
	if err := s.Run(context.Background(), gateway.StdioTransport()); err != nil {
		log.Fatal(err)
	}
}
