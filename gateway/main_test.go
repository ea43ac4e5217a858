package gateway

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init() // the gateway re-executes this test binary as the sandbox helper
	goleak.VerifyTestMain(m)
}
