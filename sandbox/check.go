package sandbox

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/cgroup"
)

// Protection is one protection as Check found it on this kernel.
type Protection struct {
	Name      string // e.g. "user namespace", "landlock"
	Available bool
	Detail    string // what was found, or the kernel's reason when unavailable
}

// CheckReport is what Check found: each protection and the confinement a
// server gets here under the default profile.
type CheckReport struct {
	Protections []Protection
	Confinement Confinement
}

// Check starts a server ("true") under profile, the way Spawn does, and
// reports each protection with the reason when it is missing, plus the
// resulting confinement level. It needs Init, like Spawn.
func Check(ctx context.Context, profile Profile) (CheckReport, error) {
	if !initCalled.Load() {
		return CheckReport{}, fmt.Errorf("sandbox check: Init was not called")
	}
	profile.Mode = ModeBestEffort
	c, err := checkSpawn(ctx, "check", profile)
	if err != nil {
		return CheckReport{}, err
	}
	reason := func(prefix string) string {
		for _, m := range c.Missing {
			if strings.HasPrefix(m, prefix) {
				return m
			}
		}
		return "not achieved"
	}
	item := func(name string, ok bool, yes, prefix string) Protection {
		if ok {
			return Protection{name, true, yes}
		}
		return Protection{name, false, reason(prefix)}
	}
	r := CheckReport{Confinement: c}
	r.Protections = append(r.Protections,
		item("pid namespace", c.PIDNamespace, "the server's tree dies with its init", "pid namespace"),
		item("user namespace", c.UserNamespace, "server runs as an unprivileged uid of its own", "user namespace"),
		item("mount namespace", c.MountNamespace, "fresh /proc, tmpfs over /tmp /var/tmp /run /dev/shm", "mount"),
		item("network namespace", c.NetworkNamespace, "empty network (loopback only)", "network"),
		item("ipc+uts namespaces", c.IPCNamespace && c.UTSNamespace, "own System V IPC and host name", "uts"),
	)
	abi, llerr := llsys.LandlockGetABIVersion()
	ll := item("landlock", c.Landlock > 0, fmt.Sprintf("ABI %d enforced", c.Landlock), "landlock")
	if llerr != nil {
		ll.Detail = fmt.Sprintf("landlock: %v (kernel without Landlock, or not in the lsm= boot list)", llerr)
	} else if !ll.Available {
		ll.Detail += fmt.Sprintf(" (kernel ABI %d)", abi)
	}
	r.Protections = append(r.Protections, ll,
		item("seccomp", c.Seccomp, "syscall denylist + 32-bit/x32 guard", "seccomp"),
		item("no_new_privs", c.NoNewPrivs, "setuid binaries cannot raise privileges", "no_new_privs"),
		item("capabilities", c.CapabilitiesDropped, "empty capability sets", "capabilities"),
	)
	cg := cgroup.Detect()
	switch {
	case cg.Limits:
		r.Protections = append(r.Protections, Protection{"cgroup v2", true, "own cgroup: memory.max, pids.max, cgroup.kill"})
	case cg.Parent != "":
		r.Protections = append(r.Protections, Protection{"cgroup v2", cg.Kill,
			"cgroup.kill only; memory and processes bounded by RLIMIT_DATA and RLIMIT_NPROC: " + cg.Reason})
	default:
		r.Protections = append(r.Protections, Protection{"cgroup v2", false, cg.Reason + "; limits by rlimit only"})
	}
	cr := unix.CloseRange(^uint(0)-1, ^uint(0)-1, 0)
	r.Protections = append(r.Protections, Protection{"close_range", cr == nil, errText(cr, "inherited fds never reach a server")})
	fd, perr := unix.PidfdOpen(unix.Getpid(), 0)
	if perr == nil {
		unix.Close(fd)
	}
	r.Protections = append(r.Protections, Protection{"pidfd", perr == nil, errText(perr, "signals cannot hit a reused pid")})
	eg, err := checkEgress(ctx, profile)
	if err != nil {
		return CheckReport{}, err
	}
	r.Protections = append(r.Protections, eg)
	return r, nil
}

// checkEgress starts a second server with an egress allowlist and reports
// whether it got the proxy: a listener on EgressProxyAddr inside its own
// network namespace, handed to and served by this process. It does not
// reach out: whether allowed hosts resolve and answer from here is the
// host network's business.
func checkEgress(ctx context.Context, profile Profile) (Protection, error) {
	const name = "egress proxy"
	if profile.withDefaults().Network == NetworkHost {
		return Protection{name, false, "network host: the server uses the host's network directly, without the proxy"}, nil
	}
	profile.Egress = Egress{Allow: []string{"egress-check.invalid"}}
	c, err := checkSpawn(ctx, "check-egress", profile)
	if err != nil {
		return Protection{}, err
	}
	if c.Network == NetworkProxy {
		return Protection{name, true, "allowlisted HTTPS via " + EgressProxyAddr + " in the server's own network; internal addresses refused"}, nil
	}
	for _, m := range c.Missing {
		if strings.HasPrefix(m, "egress proxy") || strings.HasPrefix(m, "network") {
			return Protection{name, false, m}, nil
		}
	}
	return Protection{name, false, "not achieved"}, nil
}

// checkSpawn runs "true" under profile and returns what its start achieved.
func checkSpawn(ctx context.Context, name string, profile Profile) (Confinement, error) {
	p, err := Spawn(ctx, Spec{Name: name, Command: "true", Profile: profile})
	if err != nil {
		return Confinement{}, fmt.Errorf("sandbox check: %w", err)
	}
	_ = p.Wait()
	if err := p.Close(); err != nil {
		return Confinement{}, fmt.Errorf("sandbox check: %w", err)
	}
	return p.Confinement(), nil
}

func errText(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

// Write prints the report as a table, one protection a line, then the
// level: "strong", "partial" or "weak".
func (r CheckReport) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range r.Protections {
		state := "available"
		if !p.Available {
			state = "UNAVAILABLE"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, state, p.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "level: %s\n", r.Confinement.Level)
	return err
}
