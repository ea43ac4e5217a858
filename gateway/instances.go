package gateway

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// InstancesConfig says whether a server runs once for every client
// (shared, the default) or once per principal. A per-principal server
// keeps one principal's state (a memory server's graph, a shell's working
// directory) from every other principal, and whatever it sends while
// serving a call (log messages, sampling, elicitation and roots requests)
// can only be for that principal: see RATIONALE.md, "Why a server can run
// once per principal".
type InstancesConfig struct {
	// Per is InstancesShared (the default) or InstancesPerPrincipal.
	Per string `yaml:"per" json:"per"`
	// Max bounds the per-principal instances running at once. A principal
	// without one when all are busy is refused; an idle one is stopped to
	// make room. Zero means DefaultMaxInstances.
	Max int `yaml:"max" json:"max"`
	// IdleTimeout is how long a per-principal instance with no request in
	// flight keeps running. Zero means DefaultInstanceIdleTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout"`
}

// Values of InstancesConfig.Per.
const (
	// InstancesShared runs the server once; every client's requests go to it.
	InstancesShared = "shared"
	// InstancesPerPrincipal runs the server once for listing and once for
	// each principal (authentication method and id) that makes a request.
	InstancesPerPrincipal = "principal"
)

// Defaults of InstancesConfig.
const (
	DefaultMaxInstances        = 16
	DefaultInstanceIdleTimeout = 10 * time.Minute
)

// perPrincipal reports whether the server runs once per principal.
func (c InstancesConfig) perPrincipal() bool { return c.Per == InstancesPerPrincipal }

func (c InstancesConfig) withDefaults() InstancesConfig {
	if c.Per == "" {
		c.Per = InstancesShared
	}
	if c.Max == 0 {
		c.Max = DefaultMaxInstances
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultInstanceIdleTimeout
	}
	return c
}

// problems reports what is wrong with a server's instances block under key.
func (c InstancesConfig) problems(key string, bad func(key, problem, fix string)) {
	if c.Per != "" && c.Per != InstancesShared && c.Per != InstancesPerPrincipal {
		bad(key+".per", fmt.Sprintf("%q is not an instances mode", c.Per),
			"use shared (one server for every client, the default) or principal (one per principal)")
	}
	if c.Max < 0 {
		bad(key+".max", fmt.Sprintf("negative (%d)", c.Max),
			fmt.Sprintf("use a count such as 16, or 0 for the default (%d)", DefaultMaxInstances))
	}
	if c.IdleTimeout < 0 {
		bad(key+".idle_timeout", fmt.Sprintf("negative (%s)", c.IdleTimeout),
			fmt.Sprintf(`use a duration such as "10m", or 0 for the default (%s)`, DefaultInstanceIdleTimeout))
	}
	if !c.perPrincipal() && (c.Max != 0 || c.IdleTimeout != 0) {
		bad(key, "sets max or idle_timeout for a shared server", "set per: principal, or remove them")
	}
}

// errInstancesBusy is the answer to a principal that would need an instance
// of its own while every allowed instance has a request in flight.
var errInstancesBusy = errors.New("every per-principal instance of the server is busy; retry later")

// principalInstances are the per-principal instances of one upstream (the
// primary, started with the gateway, which serves the listings and
// resource subscriptions). Each is an upstream of its own: its own
// processes or remote sessions, and its own calls in flight, so that what
// it sends is routed among one principal's requests only.
type principalInstances struct {
	primary *upstream
	cfg     InstancesConfig // with defaults
	// ctx bounds the starts in progress: close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	running map[string]*principalInstance // principal key → instance
}

// principalInstance is one principal's instance: starting while ready is
// open, then running (u set) or failed (err set).
type principalInstance struct {
	key   string
	ready chan struct{}
	u     *upstream
	err   error

	// Guarded by principalInstances.mu:
	holds    int       // requests holding it
	lastUsed time.Time // when the last hold ended
	idle     *time.Timer
	gen      uint64 // counts holds taken, so that an idle timer armed before the last one stops nothing
}

func newPrincipalInstances(primary *upstream) *principalInstances {
	ctx, cancel := context.WithCancel(primary.g.supervisor.context())
	return &principalInstances{primary: primary, cfg: primary.cfg.Instances.withDefaults(), ctx: ctx, cancel: cancel,
		running: map[string]*principalInstance{}}
}

// instanceKey names a principal's instance: its authentication method and
// id, whatever transport its requests come by.
func instanceKey(p policy.Principal) string {
	p = principalDefaults(p) // as policy sees it: an embedder's empty method is "none"
	return p.AuthMethod + "\x00" + p.ID
}

// instanceFor is the upstream that serves principal's requests to u: u
// itself for a shared server, else principal's own instance of it, started
// on first use. release must be called once the request is done with it.
func (g *Gateway) instanceFor(ctx context.Context, u *upstream, principal policy.Principal) (_ *upstream, release func(), err error) {
	if u.instances == nil {
		return u, func() {}, nil
	}
	return u.instances.acquire(ctx, instanceKey(principal))
}

// acquire holds key's instance, starting it when there is none (or it has
// exited), and returns it with the release of the hold. An instance that
// is gone as soon as it started is started once more, not again and again.
func (s *principalInstances) acquire(ctx context.Context, key string) (*upstream, func(), error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("server %q: %w", s.primary.cfg.Name, errServerDown)
		}
		inst := s.running[key]
		if inst != nil && inst.u != nil && !inst.u.usable() {
			// Exited: stopped (what is left of it) and replaced.
			s.removeLocked(inst)
			inst = nil
		}
		if inst == nil {
			var err error
			if inst, err = s.startLocked(key); err != nil {
				s.mu.Unlock()
				return nil, nil, err
			}
		}
		inst.holds++
		inst.gen++
		if inst.idle != nil {
			inst.idle.Stop()
			inst.idle = nil
		}
		s.mu.Unlock()

		select {
		case <-inst.ready:
		case <-ctx.Done():
			s.release(inst)
			return nil, nil, ctx.Err()
		}
		switch {
		case inst.err != nil: // the start forgot it: the next request tries again
			s.release(inst)
			return nil, nil, inst.err
		case !inst.u.usable():
			s.release(inst)
			if attempt == 1 {
				continue
			}
			return nil, nil, fmt.Errorf("server %q: a per-principal instance exited as soon as it started: %w", s.primary.cfg.Name, errServerDown)
		}
		var once sync.Once
		return inst.u, func() { once.Do(func() { s.release(inst) }) }, nil
	}
}

// startLocked makes room for one more instance and starts it in the
// background (the first request's context must not cut short a start
// that later requests wait for too).
func (s *principalInstances) startLocked(key string) (*principalInstance, error) {
	if len(s.running) >= s.cfg.Max {
		var oldest *principalInstance
		for _, inst := range s.running {
			if !inst.busy() && (oldest == nil || inst.lastActive().Before(oldest.lastActive())) {
				oldest = inst
			}
		}
		if oldest == nil {
			return nil, fmt.Errorf("server %q: %w (%d running)", s.primary.cfg.Name, errInstancesBusy, len(s.running))
		}
		s.removeLocked(oldest)
	}
	inst := &principalInstance{key: key, ready: make(chan struct{})}
	s.running[key] = inst
	g := s.primary.g
	started := g.inBackground(func() {
		ctx, cancel := context.WithTimeout(s.ctx, startTimeout)
		defer cancel()
		u, err := startInstance(ctx, s.primary)
		s.mu.Lock()
		if s.closed || s.running[key] != inst {
			if u != nil {
				_ = u.close()
			}
			u, err = nil, fmt.Errorf("server %q: %w", s.primary.cfg.Name, errServerDown)
		}
		inst.u, inst.err = u, err
		if err != nil && s.running[key] == inst {
			delete(s.running, key) // the next request tries again
			if inst.idle != nil {
				inst.idle.Stop()
				inst.idle = nil
			}
		}
		s.mu.Unlock()
		if err != nil {
			g.logger.Warn("per-principal instance not started", "server", s.primary.cfg.Name, "error", err)
		} else {
			g.logger.Info("per-principal instance started", "server", s.primary.cfg.Name)
		}
		close(inst.ready)
	})
	if !started {
		delete(s.running, key)
		return nil, errors.New("gateway: closed")
	}
	return inst, nil
}

// release ends one hold; the last one arms the idle timer.
func (s *principalInstances) release(inst *principalInstance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst.holds--
	inst.lastUsed = time.Now()
	if inst.holds > 0 || s.closed || s.running[inst.key] != inst {
		return
	}
	s.armLocked(inst, s.cfg.IdleTimeout)
}

// armLocked has expire look at inst after d, unless a hold is taken first.
func (s *principalInstances) armLocked(inst *principalInstance, d time.Duration) {
	gen := inst.gen
	inst.idle = time.AfterFunc(d, func() { s.expire(inst, gen) })
}

// busy reports whether inst is starting, held, or serving a call; a
// bridged call goes on serving after the request that started it
// released its hold. Call it with principalInstances.mu held.
func (inst *principalInstance) busy() bool {
	return inst.u == nil || inst.holds > 0 || inst.u.calls.inFlight()
}

// lastActive is when inst last ended a hold or a call.
func (inst *principalInstance) lastActive() time.Time {
	t := inst.lastUsed
	if inst.u != nil {
		if done := inst.u.calls.lastDone(); done.After(t) {
			t = done
		}
	}
	return t
}

// expire stops inst if no hold was taken since the timer was armed (gen)
// and it has been idle for the idle timeout; one still serving a call, or
// idle for less, is looked at again when the timeout would end.
func (s *principalInstances) expire(inst *principalInstance, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.running[inst.key] != inst || inst.holds > 0 || inst.gen != gen {
		return
	}
	if inst.busy() {
		s.armLocked(inst, s.cfg.IdleTimeout)
		return
	}
	if left := s.cfg.IdleTimeout - time.Since(inst.lastActive()); left > 0 {
		s.armLocked(inst, left)
		return
	}
	s.primary.g.logger.Info("per-principal instance idle: stopped", "server", s.primary.cfg.Name, "idle", s.cfg.IdleTimeout)
	s.removeLocked(inst)
}

// removeLocked forgets inst and stops it in the background, so that a
// process's stop sequence does not hold the lock.
func (s *principalInstances) removeLocked(inst *principalInstance) {
	delete(s.running, inst.key)
	if inst.idle != nil {
		inst.idle.Stop()
		inst.idle = nil
	}
	if u := inst.u; u != nil {
		if !s.primary.g.inBackground(func() { _ = u.close() }) {
			_ = u.close()
		}
	}
}

// count is how many instances are running or starting.
func (s *principalInstances) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// allInstances are u's running per-principal instances (none for a shared
// server).
func (u *upstream) allInstances() []*upstream {
	if u.instances == nil {
		return nil
	}
	return u.instances.all()
}

// all are the running instances.
func (s *principalInstances) all() []*upstream {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*upstream
	for _, inst := range s.running {
		if inst.u != nil {
			out = append(out, inst.u)
		}
	}
	return out
}

// close stops every instance and every start in progress; acquire fails
// from then on.
func (s *principalInstances) close() error {
	s.mu.Lock()
	s.closed = true
	var stop []*principalInstance
	for _, inst := range s.running {
		if inst.idle != nil {
			inst.idle.Stop()
		}
		stop = append(stop, inst)
	}
	s.running = map[string]*principalInstance{}
	s.mu.Unlock()
	s.cancel()
	// In parallel: each stop may take the stop sequence's grace periods.
	errs := make([]error, len(stop))
	var wg sync.WaitGroup
	for i, inst := range stop {
		wg.Go(func() {
			<-inst.ready // a start in progress ends at once: its context is done
			if inst.u != nil {
				errs[i] = inst.u.close()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startInstance starts another instance of primary's server: the same
// command, environment, confinement or remote endpoint, spoken to in the
// eras primary found (no probe again). It serves requests only: its own
// list_changed notifications are not followed (the catalog follows
// primary's), and it holds no resource subscription.
func startInstance(ctx context.Context, primary *upstream) (_ *upstream, err error) {
	g := primary.g
	u := &upstream{cfg: primary.cfg, g: g, calls: callRegistry{streamKey: newStreamKey()}, instance: true}
	defer func() {
		if err != nil {
			_ = u.close()
		}
	}()
	env := g.envs[primary.cfg.Name]
	if u.legacy, err = u.connect(ctx, env, legacyProtocolVersion); err != nil {
		return nil, err
	}
	if primary.modern != nil {
		if u.modern, err = u.connect(ctx, env, modernProtocolVersion); err != nil {
			return nil, err
		}
	}
	if u.legacy.proc != nil {
		u.confinement = confinementOf(u.legacy.proc.Confinement())
		if !sameConfinement(u.confinement, primary.confinement) {
			return nil, fmt.Errorf("server %q: a per-principal instance was confined otherwise than the server policy decides on (level %s, missing %q; the server: level %s, missing %q)",
				primary.cfg.Name, u.confinement.Level, u.confinement.Missing, primary.confinement.Level, primary.confinement.Missing)
		}
	}
	// A session that ends (a remote server forgetting it, a process gone)
	// makes the instance unusable, to be replaced on the next request.
	u.ended = make(chan struct{})
	var endOnce sync.Once
	for _, l := range []*link{u.legacy, u.modern} {
		if l != nil {
			go func() {
				_ = l.session.Wait()
				endOnce.Do(func() { close(u.ended) })
			}()
		}
	}
	u.caps = u.legacy.session.InitializeResult().Capabilities
	if u.caps == nil {
		u.caps = &mcp.ServerCapabilities{}
	}
	if u.caps.Logging != nil {
		_ = u.legacy.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"})
	}
	return u, nil
}

// sameConfinement reports whether two confinements give the same
// protections (the reasons of what is missing aside).
func sameConfinement(a, b policy.Confinement) bool {
	a.Missing, b.Missing = nil, nil
	return reflect.DeepEqual(a, b)
}

// usable reports whether an instance can take a request: its processes
// are alive and its sessions open.
func (u *upstream) usable() bool {
	if !u.alive() {
		return false
	}
	select {
	case <-u.ended:
		return false
	default:
		return true
	}
}
