package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/cgroup"
	"github.com/mcp-warden/mcp-warden/sandbox/internal/environ"
	"github.com/mcp-warden/mcp-warden/sandbox/internal/nsinit"
)

// waitDelay bounds how long reaping waits for a descendant that still holds
// the server's stderr pipe (under an init, or when Spec.Stderr is not an
// *os.File).
const waitDelay = time.Second

// errNoNamespace marks a failure to start the init that means "namespaces
// are not available here": Spawn then falls back to a direct child.
var errNoNamespace = errors.New("namespaces unavailable")

// Spawn starts the server described by spec, confined by spec.Profile. ctx
// bounds the start only: once Spawn has returned, the server runs until it
// exits or Close is called, and the caller must call Close. A server that
// cannot be started (program not found, bad Dir, refused variable, invalid
// profile) yields an error naming the server; with ModeRequire, so does a
// server that would run less than fully confined (*UnconfinedError).
//
// Cost: each server has one extra process, the init (a re-executed copy of
// this binary, a few MB resident), and Spawn waits for it to report the
// server started. Spawn is safe for concurrent use.
func Spawn(ctx context.Context, spec Spec) (*Process, error) {
	if err := spec.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("spawn %q: %w", spec.Name, err)
	}
	return spawnChecked(ctx, spec, spec.Profile.withDefaults(), nil)
}

// spawnChecked is Spawn of a validated profile, through pool if not nil.
func spawnChecked(ctx context.Context, spec Spec, prof Profile, pool *Pool) (*Process, error) {
	if spec.Dir == "" {
		// The gateway's working directory, named: a server started from a
		// checkout under /tmp would otherwise keep a working directory
		// whose path its private /tmp hides (a child it spawns there fails
		// with ENOENT); named, it is mounted back like the command.
		if wd, err := os.Getwd(); err == nil {
			spec.Dir = wd
		}
	}
	p, err := spawn(ctx, spec, prof, namespaceAttempts(prof), pool)
	if err != nil {
		return nil, fmt.Errorf("spawn %q: %w", spec.Name, err)
	}
	if prof.Mode == ModeRequire && p.confinement.Level != LevelStrong {
		_ = p.Close()
		return nil, fmt.Errorf("spawn %q: %w", spec.Name, &UnconfinedError{Missing: p.confinement.Missing})
	}
	return p, nil
}

// UnconfinedError refuses a server whose profile requires full confinement
// the kernel cannot give; Missing names each gap with its reason.
type UnconfinedError struct {
	Missing []string
}

func (e *UnconfinedError) Error() string {
	return "confinement required but not achieved: " + strings.Join(e.Missing, "; ")
}

// Confinement levels.
const (
	LevelStrong  = "strong"
	LevelPartial = "partial"
	LevelWeak    = "weak"
)

// attempt is one way of starting the init, best first.
type attempt struct {
	attr                          *syscall.SysProcAttr
	userNS, mountNS, netNS, ipcNS bool // utsNS goes with ipcNS
	serverUID                     int  // uid inside the namespace the server runs as, -1 = the init's
}

func spawn(ctx context.Context, spec Spec, prof Profile, attempts []attempt, pool *Pool) (*Process, error) {
	if spec.Command == "" {
		return nil, errors.New("no command")
	}
	env, err := environ.Build(spec.Env)
	if err != nil {
		return nil, err
	}
	if len(prof.Egress.Allow) > 0 {
		env = withProxyVariables(env)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	begin := stage("begin")
	var missing []string
	for i, at := range attempts {
		var w *idleInit
		if i == 0 {
			w = pool.take(ctx, prof.Network)
		}
		if w == nil {
			if w, err = prestart(at); err != nil {
				if errors.Is(err, errNoNamespace) {
					missing = append(missing, fmt.Sprintf("%s: %v", describeAttempt(at), errors.Unwrap(err)))
					continue
				}
				return nil, err
			}
		}
		pooled := w.pooled
		p, err := w.handOver(ctx, spec, prof, env, begin, missing)
		if errors.Is(err, errInitEnded) && pooled {
			// Killed while it waited: start one now.
			if w, err = prestart(at); err == nil {
				p, err = w.handOver(ctx, spec, prof, env, begin, missing)
			}
		}
		return p, err
	}
	st, err := newStdio()
	if err != nil {
		return nil, err
	}
	defer st.closeChildEnds()
	p := newProcess(st)
	p.name, p.grace = spec.Name, stopGrace(spec)
	if err := p.startDirect(spec, env, st); err != nil {
		st.closeParentEnds()
		return nil, err
	}
	p.confinement = achievedConfinement(prof, attempt{}, nil, false, nil, false, append(missing, "sandbox init: not used (Init not called or no namespace)"))
	return p, nil
}

func closeGroup(g *cgroup.Group) {
	if g != nil {
		_ = g.Close()
	}
}

func describeAttempt(at attempt) string {
	if at.userNS {
		return "user namespace"
	}
	if at.mountNS {
		return "namespaces"
	}
	return "pid namespace"
}

// serverUIDs hands each server of a root gateway its own unprivileged host
// uid, so that RLIMIT_NPROC counts only that server's tasks and the server
// owns none of the host's files.
var serverUIDs atomic.Uint32

const (
	serverUIDBase  = 200000
	serverUIDRange = 100000
	innerServerUID = 1000 // the server's uid inside its user namespace
)

func nextServerUID() int {
	n := serverUIDs.Add(1)
	return serverUIDBase + int((uint32(os.Getpid())*101+n)%serverUIDRange)
}

// namespaceAttempts lists the init's namespace settings to try, best first:
// every namespace in a user namespace; as root, the same without a user
// namespace; a PID namespace alone.
func namespaceAttempts(prof Profile) []attempt {
	if !initCalled.Load() {
		return nil
	}
	base := uintptr(syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP)
	net := prof.Network == NetworkNone
	if net {
		base |= syscall.CLONE_NEWNET
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if uid != 0 {
		// Unprivileged: only our own ids can be mapped; the server keeps
		// them (as root inside, with no capabilities).
		userns := func(flags uintptr) *syscall.SysProcAttr {
			return &syscall.SysProcAttr{
				Cloneflags:                 syscall.CLONE_NEWUSER | flags,
				UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
				GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
				GidMappingsEnableSetgroups: false,
				Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			}
		}
		return []attempt{
			{attr: userns(base), userNS: true, mountNS: true, netNS: net, ipcNS: true, serverUID: -1},
			{attr: userns(syscall.CLONE_NEWPID), userNS: true, serverUID: -1},
		}
	}
	host := nextServerUID()
	// Root: the init is root inside (host root, with capabilities only
	// over its own namespaces) so that it can read what the gateway can;
	// the server runs as innerServerUID, which is host uid `host`.
	full := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | base,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1},
			{ContainerID: innerServerUID, HostID: host, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1},
			{ContainerID: innerServerUID, HostID: host, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	return []attempt{
		{attr: full, userNS: true, mountNS: true, netNS: net, ipcNS: true, serverUID: innerServerUID},
		{attr: &syscall.SysProcAttr{Cloneflags: base}, mountNS: true, netNS: net, ipcNS: true, serverUID: host},
		{attr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}, serverUID: host},
	}
}

// confineRequest is what the init is asked to set up for one attempt.
func confineRequest(spec Spec, prof Profile, env []string, at attempt, cgroupLimits bool) *nsinit.Confine {
	c := &nsinit.Confine{
		Mount:          at.mountNS,
		DenyTCP:        !at.netNS && prof.Network == NetworkNone,
		Landlock:       true,
		MinLandlockABI: prof.MinLandlockABI,
		ReadOnly:       append(slices.Clone(DefaultReadOnly), prof.ReadOnly...),
		ReadWrite:      append([]string{"/tmp", "/var/tmp", "/dev/shm"}, prof.ReadWrite...),
		Seccomp:        true,
		UID:            at.serverUID,
		GID:            at.serverUID,
	}
	if at.mountNS {
		c.MaskDirs = maskedDirs
		c.Expose = exposedPaths(spec, prof, env)
		c.ProtectIn = prof.ReadWrite
	} else {
		// Without a private tmpfs, /tmp is the host's: no write access.
		c.ReadWrite = prof.ReadWrite
	}
	if at.ipcNS {
		c.Hostname = hostname(spec.Name)
	}
	l := prof.Limits
	mib := func(n int) uint64 { return uint64(n) << 20 }
	c.Rlimits = []nsinit.Rlimit{
		{Resource: unix.RLIMIT_NOFILE, Value: uint64(l.OpenFiles)},
		{Resource: unix.RLIMIT_FSIZE, Value: mib(l.FileSizeMiB)},
		{Resource: unix.RLIMIT_CORE, Value: 0},
	}
	if l.CPUSeconds > 0 {
		c.Rlimits = append(c.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_CPU, Value: uint64(l.CPUSeconds)})
	}
	if !cgroupLimits {
		// Per process and per uid: fallbacks for the cgroup's limits.
		c.Rlimits = append(c.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_DATA, Value: mib(l.MemoryMiB)})
		if at.serverUID >= 0 {
			c.Rlimits = append(c.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(l.Processes)})
		}
	}
	return c
}

// exposedPaths are the paths the server is given that lie under a masked
// directory: they are mounted back into its private view.
func exposedPaths(spec Spec, prof Profile, env []string) []string {
	cands := append(append(slices.Clone(prof.ReadOnly), prof.ReadWrite...), spec.Dir)
	if path, err := environ.Resolve(spec.Command, env, spec.Dir); err == nil {
		cands = append(cands, path)
	}
	if len(spec.Args) > 0 && filepath.IsAbs(spec.Args[0]) { // an interpreter's script
		cands = append(cands, spec.Args[0])
	}
	var out []string
	for _, c := range cands {
		c = filepath.Clean(c)
		for _, m := range maskedDirs {
			if strings.HasPrefix(c, m+"/") && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

func hostname(name string) string {
	h := "mcp-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
	return h[:min(len(h), 63)]
}

// achievedConfinement sums up what one start achieved.
func achievedConfinement(prof Profile, at attempt, group *cgroup.Group, limited bool, a *nsinit.Achieved, proxy bool, missing []string) Confinement {
	c := Confinement{ProcessGroup: true, ParentDeathSignal: true, PIDNamespace: at.attr != nil,
		UserNamespace: at.userNS, NetworkNamespace: at.netNS, IPCNamespace: at.ipcNS, UTSNamespace: at.ipcNS,
		Network: string(NetworkHost)}
	if at.netNS {
		c.Network = string(NetworkNone)
		if proxy {
			c.Network = NetworkProxy
		}
	}
	if a != nil {
		c.MountNamespace = at.mountNS && a.Mount
		c.Landlock = a.Landlock
		c.Seccomp = a.Seccomp
		c.NoNewPrivs = a.NoNewPrivs
		c.CapabilitiesDropped = a.CapabilitiesDropped
		missing = append(missing, a.Missing...)
	}
	if group != nil {
		c.Cgroup = "kill"
		if limited {
			c.Cgroup = "limits"
		}
	}
	if c.PIDNamespace && !c.MountNamespace && at.mountNS && a != nil && len(a.Missing) == 0 {
		missing = append(missing, "mount namespace: not set up")
	}
	strong := c.PIDNamespace && c.UserNamespace && c.MountNamespace && c.IPCNamespace && c.UTSNamespace &&
		(c.NetworkNamespace || prof.Network == NetworkHost) && (len(prof.Egress.Allow) == 0 || proxy) &&
		c.Landlock >= prof.MinLandlockABI && c.Seccomp && c.NoNewPrivs && c.CapabilitiesDropped
	switch {
	case strong:
		c.Level = LevelStrong
		c.Missing = nil
	case c.PIDNamespace || c.Landlock > 0 || c.Seccomp:
		c.Level = LevelPartial
		c.Missing = missing
	default:
		c.Level = LevelWeak
		c.Missing = missing
	}
	return c
}

// namespaceUnavailable tells clone/exec refusals of the init (no privilege,
// namespaces disabled or exhausted, no /proc) from other start failures.
func namespaceUnavailable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EINVAL, syscall.ENOSPC,
		syscall.EUSERS, syscall.ENOSYS, syscall.ENOENT, syscall.EACCES} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// startDirect is the fallback without an init: the server itself is the
// child, in its own process group; setsid escapees can outlive it.
func (p *Process) startDirect(spec Spec, env []string, st *stdio) error {
	path, err := environ.Resolve(spec.Command, env, spec.Dir)
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{spec.Command}, spec.Args...),
		Env:         env,
		Dir:         spec.Dir,
		Stdin:       st.childIn,
		Stdout:      st.childOut,
		Stderr:      spec.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		WaitDelay:   waitDelay,
	}
	if err := p.start(cmd, exitError); err != nil {
		return fmt.Errorf("command %q: %w", spec.Command, err)
	}
	return nil
}

// start runs cmd.Start and later cmd.Wait on one goroutine locked to its OS
// thread: Pdeathsig fires when the creating thread exits (golang/go#27505),
// so the thread must outlive the child. The goroutine never unlocks; its
// thread ends after the child is reaped. It waits for the child's exit in
// the runtime's poller (awaitExit) before cmd.Wait, so that no thread of the
// gateway sits in waitid(2) for the life of a server. Then status computes
// the exit error and Done closes.
func (p *Process) start(cmd *exec.Cmd, status func(*os.ProcessState) *ExitError) error {
	pidfd := -1
	cmd.SysProcAttr.PidFD = &pidfd
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		awaitExit(pidfd)
		_ = cmd.Wait() // the status comes from ProcessState; ErrWaitDelay only means stderr was held open
		p.exit = status(cmd.ProcessState)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return err
	}
	p.cmd = cmd
	p.pid = cmd.Process.Pid
	return nil
}

// stdio holds the pipes for the server's stdin and stdout. The server's ends
// are passed as *os.File so no copying goroutine sits in between and reads
// see every byte the server wrote before exiting.
type stdio struct {
	childIn, childOut *os.File // the server's ends
	in, out           *os.File // the gateway's ends
}

func newStdio() (*stdio, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	return &stdio{childIn: inR, childOut: outW, in: inW, out: outR}, nil
}

func (s *stdio) closeChildEnds() {
	s.childIn.Close()
	s.childOut.Close()
}

func (s *stdio) closeParentEnds() {
	s.in.Close()
	s.out.Close()
}

// awaitExit returns when the process of pidfd has exited, waiting in the
// runtime's poller (a pidfd is readable once its process has exited), and
// closes pidfd; with no pidfd (-1) it returns at once and cmd.Wait blocks
// in waitid(2) as before. A thread blocked in a system call that waits on
// another process can stall a stop-the-world pause of the runtime until
// the call returns (see RATIONALE, "Why standard input is read through the
// poller"); for a server that runs for hours, that call is waitid.
func awaitExit(pidfd int) {
	if pidfd < 0 {
		return
	}
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		_ = syscall.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		// Read resets the poller's readiness before its first call, so an
		// exit that came before is asked of the kernel, not assumed either
		// way: waitid without waiting (WNOHANG) or reaping (WNOWAIT, the
		// child stays for cmd.Wait). An exit after that reset wakes the
		// poller. An error ends the wait; cmd.Wait then blocks as before.
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || info.Signo != 0
	})
}
