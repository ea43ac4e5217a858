package sandbox

import "testing"

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
