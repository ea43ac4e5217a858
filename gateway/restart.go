package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RestartConfig says whether and how a stdio server whose process exits
// while the gateway runs is started again. The zero value restarts on
// failure with the defaults below. Remote (url) servers are not restarted.
type RestartConfig struct {
	// Policy is RestartOnFailure (the default) or RestartNever.
	Policy string `yaml:"policy" json:"policy"`
	// MaxAttempts is how many restarts in a row may fail (or crash before
	// the server stayed up RestartStableAfter) before the gateway gives up
	// and leaves the server down. Zero means DefaultRestartAttempts.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// Backoff is the wait before the first restart; each further attempt
	// in a row waits twice as long, up to MaxBackoff. Zero means
	// DefaultRestartBackoff.
	Backoff time.Duration `yaml:"backoff" json:"backoff"`
	// MaxBackoff caps the wait. Zero means DefaultRestartMaxBackoff.
	MaxBackoff time.Duration `yaml:"max_backoff" json:"max_backoff"`
}

// Restart policies (RestartConfig.Policy).
const (
	// RestartOnFailure restarts a server whose process exits while the
	// gateway runs: with its stdin still open, any exit is a failure.
	RestartOnFailure = "on_failure"
	// RestartNever leaves an exited server down until the gateway restarts.
	RestartNever = "never"
)

// Restart defaults: about 15 s of attempts (0.5+1+2+4+8) before giving up.
const (
	DefaultRestartAttempts   = 5
	DefaultRestartBackoff    = 500 * time.Millisecond
	DefaultRestartMaxBackoff = 30 * time.Second
	// RestartStableAfter is how long a server must stay up for its next
	// exit to count as a fresh failure: the attempt count and the backoff
	// start over.
	RestartStableAfter = time.Minute
)

func (r RestartConfig) withDefaults() RestartConfig {
	if r.Policy == "" {
		r.Policy = RestartOnFailure
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultRestartAttempts
	}
	if r.Backoff == 0 {
		r.Backoff = DefaultRestartBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = DefaultRestartMaxBackoff
	}
	r.MaxBackoff = max(r.MaxBackoff, r.Backoff)
	return r
}

// delay is the wait before restart attempt n (1-based): Backoff doubled
// for each attempt before it, capped at MaxBackoff.
func (r RestartConfig) delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// problems reports what is wrong with a server's restart block under key.
func (r RestartConfig) problems(key string, remote bool, bad func(key, problem, fix string)) {
	if remote && r != (RestartConfig{}) {
		bad(key, "set on a remote (url) server", "remove it: only stdio servers are restarted")
		return
	}
	if r.Policy != "" && r.Policy != RestartOnFailure && r.Policy != RestartNever {
		bad(key+".policy", fmt.Sprintf("%q is not a restart policy", r.Policy),
			"use on_failure (restart an exited server, the default) or never")
	}
	if r.MaxAttempts < 0 {
		bad(key+".max_attempts", fmt.Sprintf("negative (%d)", r.MaxAttempts),
			fmt.Sprintf("use a count such as 5, or 0 for the default (%d); policy: never turns restarts off", DefaultRestartAttempts))
	}
	if r.Backoff < 0 {
		bad(key+".backoff", fmt.Sprintf("negative (%s)", r.Backoff),
			fmt.Sprintf(`use a duration such as "500ms", or 0 for the default (%s)`, DefaultRestartBackoff))
	}
	if r.MaxBackoff < 0 {
		bad(key+".max_backoff", fmt.Sprintf("negative (%s)", r.MaxBackoff),
			fmt.Sprintf(`use a duration such as "30s", or 0 for the default (%s)`, DefaultRestartMaxBackoff))
	}
}

// supervisor holds what ends every upstream's supervision: Close cancels
// its context, which ends backoff waits and restarts in progress at once.
// The zero value is ready.
type supervisor struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *supervisor) context() context.Context {
	s.once.Do(func() { s.ctx, s.cancel = context.WithCancel(context.Background()) })
	return s.ctx
}

// stop ends supervision; restarts after it never happen.
func (s *supervisor) stop() {
	s.context()
	s.cancel()
}

func newRestartsCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcp_warden_upstream_restarts_total",
		Help: "Times an upstream server that exited while the gateway ran was started again and listed.",
	}, []string{"server"})
}

// supervise watches each stdio upstream started: when its process exits,
// its tools leave the lists and it is restarted per its restart policy.
// Call it with g.mu held, once the upstreams are in place.
func (g *Gateway) supervise(started []*upstream) {
	for _, u := range started {
		if u.legacy != nil && u.legacy.proc != nil {
			g.metrics.restarts.WithLabelValues(u.cfg.Name) // a series from the start, at 0
			g.inBackground(func() { g.superviseUpstream(u) })
		}
	}
}

// superviseUpstream runs for the life of one configured stdio server:
// it waits for the running upstream to exit, takes it out of the catalog,
// and starts it again with exponential backoff until it is back, the
// attempts run out, or the gateway closes.
func (g *Gateway) superviseUpstream(u *upstream) {
	ctx := g.supervisor.context()
	rc := u.cfg.Restart.withDefaults()
	name := u.cfg.Name
	failures := 0
	for {
		upSince := time.Now()
		reason, exited := u.waitExit(ctx)
		if !exited || !g.markDown(ctx, u, reason) {
			return
		}
		if time.Since(upSince) >= RestartStableAfter {
			failures = 0
		}
		for {
			failures++
			if rc.Policy == RestartNever || failures > rc.MaxAttempts {
				g.logger.Error("server down, not restarted", "server", name, "exit", reason.Error(),
					"policy", rc.Policy, "attempts", failures-1)
				g.mu.Lock()
				g.setStatusLocked(ServerStatus{Name: name, Err: fmt.Errorf("server exited, not restarted after %d attempts: %w", failures-1, reason)})
				g.mu.Unlock()
				return
			}
			delay := rc.delay(failures)
			g.logger.Warn("server exited; restarting", "server", name, "attempt", failures, "exit", reason.Error(), "delay", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			nu, err := startUpstream(ctx, g, u.cfg, g.envs[name])
			if ctx.Err() != nil {
				if nu != nil {
					_ = nu.close()
				}
				return
			}
			if err != nil {
				reason = err
				continue
			}
			if !g.markUp(ctx, nu) {
				_ = nu.close()
				return
			}
			g.resubscribe(ctx, nu)
			g.metrics.restarts.WithLabelValues(name).Inc()
			nu.mu.RLock()
			tools := len(nu.tools)
			nu.mu.RUnlock()
			g.logger.Info("server restarted", "server", name, "attempt", failures, "tools", tools,
				"confinement", nu.confinement.Level, "landlock", nu.confinement.Landlock)
			u = nu
			break
		}
	}
}

// waitExit waits for a process of u to exit and says why it did; false
// when ctx ended first.
func (u *upstream) waitExit(ctx context.Context) (error, bool) {
	var modernDone <-chan struct{}
	if u.modern != nil && u.modern.proc != nil {
		modernDone = u.modern.proc.Done()
	}
	l := u.legacy
	select {
	case <-ctx.Done():
		return nil, false
	case <-l.proc.Done():
	case <-modernDone:
		l = u.modern
	}
	if err := l.proc.Wait(); err != nil {
		return err, true
	}
	return errors.New("exited with status 0"), true
}

// markDown takes u out of the catalog, stops what is left of it (the
// other link's process) and tells downstream clients their lists changed.
// False when the gateway is closed.
func (g *Gateway) markDown(ctx context.Context, u *upstream, reason error) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.upstreams = slices.DeleteFunc(slices.Clone(g.upstreams), func(x *upstream) bool { return x == u })
	before, cat := g.rebuildCatalogLocked()
	g.setStatusLocked(ServerStatus{Name: u.cfg.Name, Err: fmt.Errorf("server exited: %w", reason)})
	g.mu.Unlock()
	_ = u.close()
	g.tellListsChanged(ctx, before, cat, listAnnouncement{server: u.cfg.Name, event: announcedServerStopped, tools: true, resources: true, prompts: true})
	return true
}

// markUp puts a restarted upstream in its configured place in the catalog
// and tells downstream clients their lists changed. False when the gateway
// is closed: the caller stops nu.
func (g *Gateway) markUp(ctx context.Context, nu *upstream) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	order := func(x *upstream) int {
		return slices.IndexFunc(g.cfg.Servers, func(sc ServerConfig) bool { return sc.Name == x.cfg.Name })
	}
	ups := append(slices.Clone(g.upstreams), nu)
	slices.SortStableFunc(ups, func(a, b *upstream) int { return order(a) - order(b) })
	g.upstreams = ups
	before, cat := g.rebuildCatalogLocked()
	nu.mu.RLock()
	tools := len(nu.tools)
	nu.mu.RUnlock()
	g.setStatusLocked(ServerStatus{Name: nu.cfg.Name, Running: true, Tools: tools})
	g.mu.Unlock()
	g.tellListsChanged(ctx, before, cat, listAnnouncement{server: nu.cfg.Name, event: announcedServerStarted, tools: true, resources: true, prompts: true})
	return true
}

// rebuildCatalogLocked rebuilds the catalog from the running upstreams, so
// every later list is decided afresh by policy; it returns the old and the
// new one.
func (g *Gateway) rebuildCatalogLocked() (before, after *catalog) {
	cat, notes := buildCatalog(g.upstreams, g.cfg.Naming)
	for _, n := range notes {
		g.logger.Warn("not exposed", "detail", n)
	}
	before, g.catalog = g.catalog, cat
	return before, cat
}

// setStatusLocked replaces the status of st.Name. It writes a copy:
// readers (the metrics collector) hold the old slice after unlocking.
func (g *Gateway) setStatusLocked(st ServerStatus) {
	g.status = slices.Clone(g.status)
	for i := range g.status {
		if g.status[i].Name == st.Name {
			g.status[i] = st
		}
	}
}

// errServerDown is the error of a request to a server whose process has
// exited: it is being restarted, or was given up on.
var errServerDown = errors.New("server is down (its process exited); it is being restarted unless its restart attempts ran out")

// downError explains err (nil before the request was sent) when u's
// process has exited, so that a caller learns the server is down rather
// than reading a broken pipe.
func (u *upstream) downError(err error) error {
	if u.alive() {
		return err
	}
	if err == nil {
		return fmt.Errorf("server %q: %w", u.cfg.Name, errServerDown)
	}
	return fmt.Errorf("server %q: %w (%w)", u.cfg.Name, errServerDown, err)
}
