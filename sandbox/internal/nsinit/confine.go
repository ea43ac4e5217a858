package nsinit

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// confine applies c to the init in the order of runc's and nsjail's inits
// (mounts, host name, network, rlimits, capabilities, Landlock, seccomp) and
// returns what it achieved. A protection that fails is named in Missing and
// the rest still applies: the parent decides whether a gap refuses the
// server. program is the server's resolved executable, args its argv.
//
// It must run on the goroutine (locked to its thread) that then forks the
// server: Landlock and seccomp are synchronised to every thread, but the
// thread that forks is the one whose state the server inherits.
func confine(c *Confine, early prepared, program string, args, env []string, trace *stages) *Achieved {
	a := &Achieved{}
	miss := func(what string, err error) {
		a.Missing = append(a.Missing, fmt.Sprintf("%s: %v", what, err))
	}
	if early.loopback != nil {
		miss("network namespace", fmt.Errorf("loopback up: %w", early.loopback))
	}
	if c.Mount && early.mounts != nil {
		miss("mount namespace", early.mounts)
	} else if c.Mount {
		// What the server runs (program, interpreter chain, script and its
		// package tree) is mounted back too when it lives under a masked
		// directory — a checkout under /tmp, say.
		expose := slices.Clone(c.Expose)
		for _, p := range executionChain(program, args, env) {
			if underAny(p, c.MaskDirs) && !slices.Contains(expose, p) {
				expose = append(expose, p)
			}
		}
		if err := maskHostDirs(c.MaskDirs, expose); err != nil {
			miss("mount namespace", err)
		} else {
			a.Mount = true
			if err := protectSensitive(c.ProtectIn); err != nil {
				miss("read-only sensitive files", err)
			}
		}
		trace.mark("mount")
	}
	if c.Hostname != "" {
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			miss("uts namespace", fmt.Errorf("sethostname: %w", err))
		}
		trace.mark("hostname")
	}
	if c.EgressListen != "" {
		if err := handOverListener(c.EgressListen); err != nil {
			miss("egress proxy", err)
		}
	}
	for _, r := range c.Rlimits {
		// syscall.Setrlimit, not unix: it also updates the NOFILE value Go
		// would otherwise restore in the child.
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Value, Max: r.Value}); err != nil {
			miss(fmt.Sprintf("rlimit %d", r.Resource), err)
		}
	}
	trace.mark("rlimits")
	if c.Landlock {
		ro := append(slices.Clone(c.ReadOnly), executionChain(program, args, env)...)
		abi, err := restrictPaths(ro, c.ReadWrite, c.MinLandlockABI, c.DenyTCP)
		if err != nil {
			miss("landlock", err)
		} else {
			a.Landlock = abi
		}
		trace.mark("landlock")
	}
	if err := dropBoundingSet(); err != nil {
		miss("capabilities", err)
	} else {
		a.CapabilitiesDropped = true
	}
	trace.mark("capabilities")
	if c.Seccomp {
		if err := loadSeccomp(); err != nil {
			miss("seccomp", err)
		} else {
			a.Seccomp = true
		}
		trace.mark("seccomp")
	}
	// Set by the seccomp filter already (and synchronised to every thread).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		miss("no_new_privs", err)
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil && v == 1 {
		a.NoNewPrivs = true
	}
	return a
}

// underAny reports whether path lies strictly below one of dirs.
func underAny(path string, dirs []string) bool {
	path = filepath.Clean(path)
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// prepared is what Prepare set up, or why it could not.
type prepared struct {
	mounts   error // private mounts and /proc, if asked
	loopback error // lo up, if asked
}

// prepare sets up what p asks, which depends only on the init's namespaces.
// Making every mount private is the slow step of a confined start (it walks
// the whole mount tree and its peer groups), hence its place here, where an
// init started ahead of need does it while it waits.
func prepare(p Prepare, trace *stages) prepared {
	var r prepared
	if p.PrivateMounts {
		r.mounts = privateMounts()
		trace.mark("private-mounts")
	}
	if p.LoopbackUp {
		r.loopback = loopbackUp()
		trace.mark("loopback")
	}
	return r
}

// privateMounts stops mount propagation to and from the host and mounts a
// /proc of the init's own PID namespace.
func privateMounts() error {
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// maskHostDirs mounts an empty tmpfs over each masked directory and mounts the
// exposed paths (clones of the host's, taken before masking) back at their
// places.
func maskHostDirs(mask, expose []string) error {
	type clone struct {
		path string
		fd   int
		dir  bool
	}
	var clones []clone
	defer func() {
		for _, c := range clones {
			unix.Close(c.fd)
		}
	}()
	for _, p := range expose {
		st, err := os.Stat(p)
		if err != nil {
			continue // missing paths are ignored, as in the Landlock rules
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone %s: %w", p, err)
		}
		clones = append(clones, clone{p, fd, st.IsDir()})
	}
	for _, d := range mask {
		if st, err := os.Lstat(d); err != nil || !st.IsDir() {
			continue // absent, or a symlink into another masked directory
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=256m,nr_inodes=65536"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", d, err)
		}
	}
	for _, c := range clones {
		if c.dir {
			if err := os.MkdirAll(c.path, 0o755); err != nil {
				return fmt.Errorf("expose %s: %w", c.path, err)
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
				return fmt.Errorf("expose %s: %w", c.path, err)
			}
			if f, err := os.OpenFile(c.path, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				f.Close()
			}
		}
		if err := unix.MoveMount(c.fd, "", unix.AT_FDCWD, c.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("expose %s: %w", c.path, err)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// handOverListener listens on addr (ip:port, IPv4) in the init's network
// namespace and sends the socket to the gateway on EgressFD: the gateway
// accepts the server's proxy connections itself, so no byte of them passes
// through the init.
func handOverListener(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("listen address %q: not an IPv4 address and port", addr)
	}
	defer unix.Close(EgressFD)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	if err := unix.Sendmsg(EgressFD, []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
		return fmt.Errorf("hand the listener to the gateway: %w", err)
	}
	return nil
}

// ProtectedNames are the entries of a writable directory that a server
// could use to run code outside its sandbox later (shell start-up files, git
// hooks and configuration, editor tasks, agent and MCP configuration):
// when they exist they are mounted read-only in the server's view.
var ProtectedNames = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin",
	".gitconfig", ".gitmodules", ".git/hooks", ".git/config", ".mcp.json", ".npmrc", ".envrc", ".ripgreprc",
	".ssh", ".vscode", ".idea", ".claude", ".cursor",
}

// protectSensitive mounts each existing ProtectedNames entry of dirs
// read-only over itself. A directory holding one (.git) is also made a
// mount point of its own, so that it cannot be renamed away and replaced by
// a fresh copy with a hook in it: rename(2) refuses mount points (EBUSY),
// and so does unlink.
func protectSensitive(dirs []string) error {
	for _, dir := range dirs {
		guarded := map[string]bool{}
		for _, name := range ProtectedNames {
			p := filepath.Join(dir, name)
			// A symlink cannot be mounted over; writes through it are
			// Landlock's to judge at its target.
			if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeSymlink != 0 {
				continue
			}
			if parent := filepath.Dir(p); parent != filepath.Clean(dir) && !guarded[parent] {
				if err := bindMount(parent, false); err != nil {
					return err
				}
				guarded[parent] = true
			}
			if err := bindMount(p, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// bindMount mounts a clone of path over itself, read-only if asked.
func bindMount(path string, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("clone %s: %w", path, err)
	}
	defer unix.Close(fd)
	if readOnly {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("read-only %s: %w", path, err)
		}
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount over %s: %w", path, err)
	}
	return nil
}

// restrictPaths enforces Landlock on this thread, the one that forks the
// server (Main locks it), with read-only and read-write path rules, scoping
// (abstract unix sockets, signals) and, when handleNet, every TCP (and, from
// ABI 10, UDP) bind and connect denied. Every access right the kernel's ABI
// knows is handled, so whatever no rule grants is denied. It refuses an ABI
// below floor.
//
// Only this thread, as with the capability bounding set: before ABI 8 the
// kernel cannot synchronise a domain to every thread, and go-landlock's
// psx-based synchronisation costs a round of signals to every thread (two,
// with no_new_privs), which dominated the start of a pre-started init. The
// init runs no untrusted code; the server inherits this thread's domain.
// From ABI 8 the kernel synchronises it in the same call (TSYNC), at no
// cost.
func restrictPaths(ro, rw []string, floor int, handleNet bool) (int, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("unavailable: %w", err)
	}
	if abi < floor {
		return 0, fmt.Errorf("ABI %d below the required %d", abi, floor)
	}
	attr := handledAccess(abi, handleNet)
	fd, err := llsys.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return 0, fmt.Errorf("create ruleset: %w", err)
	}
	defer unix.Close(fd)
	const (
		read  = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
		write = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
			llsys.AccessFSMakeChar | llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock |
			llsys.AccessFSMakeFifo | llsys.AccessFSMakeBlock | llsys.AccessFSMakeSym | llsys.AccessFSTruncate
		file = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSTruncate | llsys.AccessFSReadFile
	)
	roDirs, roFiles := splitDirs(ro)
	rwDirs, rwFiles := splitDirs(rw)
	// Writing to /dev/null and friends is not a way out.
	_, devs := splitDirs([]string{"/dev/null", "/dev/zero", "/dev/full"})
	for _, r := range []struct {
		paths  []string
		access uint64
	}{
		{roDirs, read}, {roFiles, read & file},
		{rwDirs, read | write}, {rwFiles, (read | write) & file}, {devs, (read | write) & file},
	} {
		for _, p := range r.paths {
			if err := allowBeneath(fd, p, r.access&attr.HandledAccessFS); err != nil {
				return 0, err
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	var flags uint32
	if abi >= 8 {
		flags = llsys.FlagRestrictSelfTSync
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return 0, fmt.Errorf("restrict: %w", err)
	}
	return abi, nil
}

// handledAccess is every access right Landlock ABI abi can restrict
// (the table of go-landlock's ABI versions), network rights only if asked.
func handledAccess(abi int, handleNet bool) llsys.RulesetAttr {
	var a llsys.RulesetAttr
	switch {
	case abi >= 9: // + resolving pathname unix sockets
		a.HandledAccessFS = 1<<17 - 1
	case abi >= 5: // + ioctl on devices
		a.HandledAccessFS = 1<<16 - 1
	case abi >= 3: // + truncate
		a.HandledAccessFS = 1<<15 - 1
	case abi == 2: // + refer
		a.HandledAccessFS = 1<<14 - 1
	default:
		a.HandledAccessFS = 1<<13 - 1
	}
	if handleNet {
		switch {
		case abi >= 10: // + UDP
			a.HandledAccessNet = 1<<4 - 1
		case abi >= 4:
			a.HandledAccessNet = 1<<2 - 1
		}
	}
	if abi >= 6 {
		a.Scoped = llsys.ScopeAbstractUnixSocket | llsys.ScopeSignal
	}
	return a
}

// allowBeneath adds a rule granting access beneath path (or to the file).
func allowBeneath(ruleset int, path string, access uint64) error {
	if access == 0 {
		return nil
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil // gone since splitDirs: nothing to grant
		}
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := llsys.LandlockAddPathBeneathRule(ruleset, &llsys.PathBeneathAttr{AllowedAccess: access, ParentFd: fd}, 0); err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	return nil
}

// splitDirs sorts existing paths into directories and other files (Landlock
// refuses directory rights on a file); missing paths are dropped.
func splitDirs(paths []string) (dirs, files []string) {
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err != nil:
		case st.IsDir():
			dirs = append(dirs, p)
		default:
			files = append(files, p)
		}
	}
	return dirs, files
}

// executionChain lists what the server needs to read to run at all: its
// program, the interpreter chain of scripts ("#!/usr/bin/env node" → env →
// node), and the script given as its first argument, with the whole package
// tree (the directory holding node_modules) when the script lives in one.
func executionChain(program string, args, env []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	next := program
	for range 4 { // env → interpreter → interpreter's own interpreter
		if next == "" {
			break
		}
		add(next)
		if real, err := filepath.EvalSymlinks(next); err == nil {
			add(real)
		}
		interp, arg := shebang(next)
		if filepath.Base(interp) == "env" && arg != "" {
			add(interp)
			interp = lookPath(arg, path)
		}
		next = interp
	}
	// The script an interpreter runs comes first ("node index.js"): only
	// that argument is read as code. Other arguments naming files grant
	// nothing; declare them in the profile.
	if len(args) > 1 && filepath.IsAbs(args[1]) {
		if st, err := os.Stat(args[1]); err == nil && st.Mode().IsRegular() {
			add(args[1])
			if root, _, ok := strings.Cut(args[1], "/node_modules/"); ok && root != "" {
				add(root)
			}
		}
	}
	return out
}

// shebang returns the interpreter and its single argument named on a
// script's first line, or "" for a binary.
func shebang(path string) (interp, arg string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", ""
	}
	fields := strings.Fields(rest)
	switch len(fields) {
	case 0:
		return "", ""
	case 1:
		return fields[0], ""
	}
	if fields[1] == "-S" && len(fields) > 2 { // env -S node --flag
		return fields[0], fields[2]
	}
	return fields[0], fields[1]
}

func lookPath(name, path string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// dropBoundingSet empties the capability bounding set of this thread, the
// one that forks the server (Main locks it): a prctl on one thread and a
// fork from another leaked the full set into the server. The server then
// execs with no capability it could regain. (Doing it on every thread
// through psx costs a round of signals per capability: ~10 ms.)
func dropBoundingSet() error {
	for c := 0; c < 64; c++ { // beyond the last capability: EINVAL
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
