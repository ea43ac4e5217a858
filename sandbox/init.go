package sandbox

import (
	"sync/atomic"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/nsinit"
)

// initCalled records that this binary dispatches the sandbox init, so that
// re-executing /proc/self/exe runs the init and not the gateway.
var initCalled atomic.Bool

// Init must be the first statement of main() (and of TestMain in every
// package whose tests spawn servers). If this process was started as the
// sandbox init it runs the init and never returns; otherwise it returns at
// once and records that Spawn may use the init. Package init functions run
// before it in both roles, so they must not have side effects.
func Init() {
	if nsinit.Requested() {
		nsinit.Main()
	}
	initCalled.Store(true)
}
