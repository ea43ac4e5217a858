package sandbox

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
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
