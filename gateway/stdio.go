package gateway

import (
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport is the transport `mcp-warden serve --stdio` answers its
// client on: MCP's stdio transport, except that standard input, when it is
// a pipe or a socket, is switched to non-blocking mode and read through the
// Go runtime's poller. A goroutine waiting for the client's next message
// then parks without holding a thread in read(2): with Go 1.26 a
// stop-the-world pause of the garbage collector that begins just as a
// thread enters such a read can wait for that read to return, so a
// process waiting for its client's next message, while the client waits
// for its answer, would hang until the client wrote again (see RATIONALE.md,
// "Why standard input is read through the poller"). Other standard inputs
// (a terminal, a file) are read as they are.
//
// Closing the transport's connection closes standard input, not standard
// output. The process has one standard input: use one StdioTransport per
// process, and read os.Stdin no more once it is connected.
func StdioTransport() *mcp.IOTransport {
	return &mcp.IOTransport{Reader: stdin(), Writer: nopWriteCloser{os.Stdout}}
}

// stdin is standard input, non-blocking and read through the poller when
// it is a pipe or a socket; made once, as a second *os.File for fd 0 would
// close it twice.
var stdin = sync.OnceValue(func() io.ReadCloser {
	var st syscall.Stat_t
	if err := syscall.Fstat(0, &st); err != nil {
		return os.Stdin
	}
	if kind := st.Mode & syscall.S_IFMT; kind != syscall.S_IFIFO && kind != syscall.S_IFSOCK {
		return os.Stdin
	}
	if err := syscall.SetNonblock(0, true); err != nil {
		return os.Stdin
	}
	// os.NewFile registers a non-blocking descriptor with the poller.
	return os.NewFile(0, "/dev/stdin")
})

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
