package sandbox

import (
	"context"
	"fmt"
	"sync"
)

// Pool keeps one sandbox init started ahead of need for each network
// setting it has served, so that a Spawn through it skips the costliest
// part of a confined start: cloning the namespaces, writing the uid/gid
// maps and the Go runtime's start-up of the re-executed binary. The waiting
// init has no server, no request and no secret yet; it gets them at Spawn
// like any other, over its pipe, and confines itself then. Only profiles
// with the namespace set of the waiting init are served from it (the
// best-effort fallbacks always start cold); a Spawn that finds none starts
// one as Spawn does.
//
// Cost: one idle process (a few MB resident), one OS thread and one
// goroutine per network setting, and each served Spawn starts the
// replacement in the background. A waiting init dies with the gateway
// (parent-death signal) and on Close. Pool is safe for concurrent use.
type Pool struct {
	mu     sync.Mutex
	closed bool
	slots  map[Network]*poolSlot
	fills  sync.WaitGroup
}

// poolSlot is the state of one network setting's waiting init.
type poolSlot struct {
	ready   *idleInit     // waits for a request; nil if none
	filling chan struct{} // closed when the start in flight ends; nil if none
	claimed bool          // a Spawn waits for the start in flight
	broken  error         // the last start failed: namespaces unavailable, stop trying
}

// NewPool returns a Pool that starts an init for the default profile
// (network none) at once. Without Init, it never starts one and Spawn
// behaves as the package's Spawn. Close it to end the waiting inits.
func NewPool() *Pool {
	pl := &Pool{slots: map[Network]*poolSlot{}}
	pl.mu.Lock()
	pl.fillLocked(NetworkNone)
	pl.mu.Unlock()
	return pl
}

// Spawn is the package's Spawn, served from the pool when it holds an init
// with the namespace set spec.Profile needs (or is starting one that no
// other Spawn waits for). A nil *Pool starts every server cold.
func (pl *Pool) Spawn(ctx context.Context, spec Spec) (*Process, error) {
	if err := spec.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("spawn %q: %w", spec.Name, err)
	}
	prof := spec.Profile.withDefaults()
	return spawnChecked(ctx, spec, prof, pl)
}

// Close ends the waiting inits and returns once they and any start in
// flight are gone. Servers already spawned are not affected. A Spawn after
// Close starts cold.
func (pl *Pool) Close() error {
	pl.mu.Lock()
	pl.closed = true
	var idle []*idleInit
	for _, s := range pl.slots {
		if s.ready != nil {
			idle = append(idle, s.ready)
			s.ready = nil
		}
	}
	pl.mu.Unlock()
	for _, w := range idle {
		w.discard()
	}
	pl.fills.Wait()
	return nil
}

// take returns the waiting init for net, waiting for one being started if
// no other Spawn does, and starts its replacement; nil if there is none.
// A nil Pool has none.
func (pl *Pool) take(ctx context.Context, net Network) *idleInit {
	if pl == nil || !initCalled.Load() {
		return nil
	}
	pl.mu.Lock()
	s := pl.slot(net)
	if s.ready == nil && s.filling != nil && !s.claimed && !pl.closed {
		s.claimed = true
		filling := s.filling
		pl.mu.Unlock()
		select {
		case <-filling:
		case <-ctx.Done():
		}
		pl.mu.Lock()
		s.claimed = false
	}
	w := s.ready
	s.ready = nil
	pl.fillLocked(net)
	pl.mu.Unlock()
	if w != nil && !w.alive() {
		w.discard() // killed while it waited; the caller starts one
		return nil
	}
	return w
}

func (pl *Pool) slot(net Network) *poolSlot {
	s := pl.slots[net]
	if s == nil {
		s = &poolSlot{}
		pl.slots[net] = s
	}
	return s
}

// fillLocked starts an init for net in the background unless one waits or
// is being started. pl.mu is held.
func (pl *Pool) fillLocked(net Network) {
	s := pl.slot(net)
	if pl.closed || s.ready != nil || s.filling != nil || s.broken != nil || !initCalled.Load() {
		return
	}
	attempts := namespaceAttempts(Profile{Network: net}.withDefaults())
	if len(attempts) == 0 {
		return
	}
	done := make(chan struct{})
	s.filling = done
	pl.fills.Add(1)
	go func() {
		defer pl.fills.Done()
		w, err := prestart(attempts[0])
		if w != nil {
			w.pooled = true
			// Ready means up and blocked on its request, past the
			// runtime's start-up.
			select {
			case <-w.reports.waiting:
			case <-w.reports.done:
			}
		}
		pl.mu.Lock()
		s.filling = nil
		if err != nil {
			s.broken = err
		} else if !pl.closed {
			s.ready, w = w, nil
		}
		close(done)
		pl.mu.Unlock()
		if w != nil { // the pool closed meanwhile
			w.discard()
		}
	}()
}
