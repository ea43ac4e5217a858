// Command garbage stands in for a broken MCP stdio server: it writes lines
// that are not JSON-RPC, then a JSON object cut off midway with no newline
// after it, and then reads stdin until EOF without ever answering, so a
// client that waits for a reply must time out. It exits 0 at EOF on stdin.
package main

import (
	"io"
	"os"
)

const garbage = "Starting server...\n" +
	"this line is not JSON\n" +
	"Content-Length: 52\n" + // a header as LSP would send it
	"[1, 2, 3]\n" + // JSON, but not a JSON-RPC message
	`{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-1` // partial, no newline

func main() {
	if _, err := io.WriteString(os.Stdout, garbage); err != nil {
		os.Exit(1)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}
