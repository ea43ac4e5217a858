package host

import (
	"context"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// watchdog stops an evaluation from another goroutine when its deadline
// passes or its caller's context ends: it sets the policy's interrupt
// global (added by preempt.Instrument), which the policy's code tests at
// every function entry and loop header and traps on, and it cancels the
// builtin running in Go, if any.
//
// The global is written by wazero's MutableGlobal.Set, an aligned 8-byte
// store into the instance's globals, from the watchdog's goroutine, while
// the policy's machine code reads it on another: no Go code reads it during
// an evaluation, so the race detector has nothing to see, and a torn read
// can only yield 0 or 1 (the flag's low byte). Nothing ever resets it: an
// interrupted instance is discarded.
type watchdog struct {
	interrupt api.MutableGlobal
	timer     *time.Timer // runs expire; made on the first evaluation with a timeout
	expireFn  func()      // expire and ctxDone as method values made once,
	ctxDoneFn func()      // so that arming allocates nothing

	mu          sync.Mutex
	running     bool
	deadline    time.Time
	callerCtx   context.Context // the evaluation's context, watched by ctxDone
	stopWatch   func() bool     // stops watching callerCtx
	cause       error           // why the evaluation was interrupted; nil if it was not
	cancelGoFns func(error)     // cancels the builtins' context, while one exists
}

func (w *watchdog) init(interrupt api.MutableGlobal) {
	w.interrupt = interrupt
	w.expireFn, w.ctxDoneFn = w.expire, w.ctxDone
}

// arm starts watching an evaluation under ctx, for at most timeout (0: no
// limit but ctx's).
func (w *watchdog) arm(ctx context.Context, timeout time.Duration) {
	w.mu.Lock()
	w.running, w.cause, w.callerCtx = true, nil, ctx
	if timeout > 0 {
		w.deadline = time.Now().Add(timeout)
	}
	w.mu.Unlock()
	if timeout > 0 {
		if w.timer == nil {
			w.timer = time.AfterFunc(timeout, w.expireFn)
		} else {
			w.timer.Reset(timeout)
		}
	}
	if ctx.Done() != nil {
		w.stopWatch = context.AfterFunc(ctx, w.ctxDoneFn)
	}
}

// disarm ends watching and returns why the evaluation was interrupted, or
// nil. A timer or context callback that fires late finds nothing running
// (or, for a later evaluation, a deadline not yet passed and a context not
// done) and does nothing.
func (w *watchdog) disarm() error {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.stopWatch != nil {
		w.stopWatch()
		w.stopWatch = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running, w.callerCtx = false, nil
	return w.cause
}

func (w *watchdog) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running && !time.Now().Before(w.deadline) {
		w.stopLocked(ErrTimeout)
	}
}

func (w *watchdog) ctxDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running && w.callerCtx != nil {
		if cause := context.Cause(w.callerCtx); cause != nil {
			w.stopLocked(cause)
		}
	}
}

func (w *watchdog) stopLocked(cause error) {
	if w.cause != nil {
		return
	}
	w.cause = cause
	w.interrupt.Set(1)
	if w.cancelGoFns != nil {
		w.cancelGoFns(cause)
	}
}

// builtinContext returns a context for the builtins of the running
// evaluation that ends when the watchdog stops it, and the function that
// releases it when the evaluation ends.
func (w *watchdog) builtinContext(cancelTopdown func()) (context.Context, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	parent := w.callerCtx
	if parent == nil { // a builtin called outside Eval, such as from a start function
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(parent)
	w.cancelGoFns = func(cause error) {
		cancel(cause)
		cancelTopdown()
	}
	if w.cause != nil {
		w.cancelGoFns(w.cause)
	}
	return ctx, func() {
		w.mu.Lock()
		w.cancelGoFns = nil
		w.mu.Unlock()
		cancel(nil)
	}
}

// stopped reports whether the running evaluation was interrupted, for a
// builtin about to run or just returned.
func (w *watchdog) stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause != nil
}
