package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/nsinit"
)

// WithoutInit makes Spawn behave, for the rest of t, as in a binary that
// never called Init: no sandbox init, the server is started directly.
func WithoutInit(t testing.TB) {
	prev := initCalled.Swap(false)
	t.Cleanup(func() { initCalled.Store(prev) })
}

// DisableInit is WithoutInit for a re-executed test binary's role.
func DisableInit() { initCalled.Store(false) }

// WithoutInitDo runs f as in a binary that never called Init.
func WithoutInitDo(f func()) {
	prev := initCalled.Swap(false)
	defer initCalled.Store(prev)
	f()
}

// TraceStages makes Spawn record, for the rest of b, when each start-up
// stage of the init ended.
func TraceStages(b testing.TB) {
	prev := traceStages.Swap(true)
	b.Cleanup(func() { traceStages.Store(prev) })
}

// StageDurations returns how long each traced start-up stage of p took
// (from the end of the previous one), in order.
func StageDurations(p *Process) (names []string, durations []time.Duration) {
	for i := 1; i < len(p.stages); i++ {
		names = append(names, p.stages[i].Name)
		durations = append(durations, time.Duration(p.stages[i].At-p.stages[i-1].At))
	}
	return names, durations
}

// SetEgressNetwork makes the egress proxy resolve and connect with resolve
// and dial for the rest of t.
func SetEgressNetwork(t testing.TB, resolve func(ctx context.Context, host string) ([]netip.Addr, error),
	dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)) {
	prevR, prevD := egressResolve, egressDial
	egressResolve, egressDial = resolve, dial
	t.Cleanup(func() { egressResolve, egressDial = prevR, prevD })
}

// InitArg0 is argv[0] of every sandbox init.
const InitArg0 = nsinit.Arg0

// WaitWarm waits until pl holds a started init for net waiting for its
// request, and returns that init's pid. It fails t if none comes (the
// start failed, or nothing is starting one).
func WaitWarm(t testing.TB, pl *Pool, net Network) int {
	t.Helper()
	pid, err := AwaitWarm(pl, net)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// AwaitWarm is WaitWarm for a re-executed test binary's role.
func AwaitWarm(pl *Pool, net Network) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pl.mu.Lock()
		s := pl.slot(net)
		ready, filling, broken := s.ready, s.filling, s.broken
		pl.mu.Unlock()
		switch {
		case ready != nil:
			return ready.p.Pid(), nil
		case broken != nil:
			return 0, fmt.Errorf("pool: starting an init for network %s failed: %w", net, broken)
		case filling == nil || time.Now().After(deadline):
			return 0, fmt.Errorf("pool: no init for network %s is waiting or being started", net)
		}
		<-filling
	}
}

// AwaitExit is awaitExit, for a pidfd the test obtained itself.
func AwaitExit(pidfd int) { awaitExit(pidfd) }
