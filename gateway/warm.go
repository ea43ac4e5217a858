package gateway

import (
	"runtime"
	"sync"
)

// warmRunner runs policy decisions on a few long-lived goroutines.
//
// The MCP SDK serves each request on a goroutine of its own, which starts
// with a small stack; a Rego evaluation recurses deeply, so on a fresh
// goroutine it spends more time growing (copying) its stack, several times
// over, than deciding. The runner's goroutines keep their grown stacks from
// one decision to the next (see RATIONALE.md, "Decisions on warm stacks").
// When every worker is busy the decision runs on the caller's goroutine, so
// the runner never queues a request behind another.
type warmRunner struct {
	jobs chan func()
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newWarmRunner() *warmRunner {
	r := &warmRunner{jobs: make(chan func()), stop: make(chan struct{})}
	for range runtime.GOMAXPROCS(0) {
		r.wg.Go(func() {
			for {
				select {
				case job := <-r.jobs:
					job()
				case <-r.stop:
					return
				}
			}
		})
	}
	return r
}

// run runs fn on an idle worker, else on the calling goroutine, and
// returns when fn has returned.
func (r *warmRunner) run(fn func()) {
	done := make(chan struct{})
	job := func() { defer close(done); fn() }
	select {
	case r.jobs <- job:
		<-done
	default:
		fn()
	}
}

// close stops the workers; later runs use the caller's goroutine.
func (r *warmRunner) close() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}
