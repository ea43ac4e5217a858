package sandbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/egress"
)

// Profile is the confinement asked for one server. The zero Profile is the
// default: best effort, no network, read access to the system directories
// and to the server's own program only, a private /tmp, default limits.
type Profile struct {
	// Mode says what happens when a protection cannot be achieved on this
	// kernel: ModeBestEffort (the default) starts the server anyway and
	// reports the gap in Process.Confinement; ModeRequire refuses to start
	// it, naming what is missing.
	Mode Mode `yaml:"mode" json:"mode"`
	// ReadOnly and ReadWrite list the files and directories (absolute
	// paths, with everything beneath them) the server may read, or read and
	// write, besides DefaultReadOnly, its program and its interpreter. A
	// path under a masked directory (/tmp, /var/tmp, /run, /dev/shm) is
	// mounted back into the server's private view. Missing paths are
	// ignored. Enforced by Landlock; file permissions still apply to the
	// server's own unprivileged uid. In each ReadWrite directory, existing
	// top-level entries that would run code later outside the sandbox
	// (.bashrc, .git/hooks, .git/config, .mcp.json, .vscode, …) are mounted
	// read-only.
	ReadOnly  []string `yaml:"read_only" json:"read_only"`
	ReadWrite []string `yaml:"read_write" json:"read_write"`
	// Network is NetworkNone (the default: an empty network namespace with
	// only loopback) or NetworkHost (the gateway's network, unconfined).
	Network Network `yaml:"network" json:"network"`
	// Egress lets a server with network none reach the listed host names
	// through the gateway's HTTPS proxy (see Egress).
	Egress Egress `yaml:"egress" json:"egress"`
	// MinLandlockABI is the lowest Landlock ABI version accepted as
	// filesystem confinement (0 = 1). Below it, Landlock counts as missing.
	MinLandlockABI int `yaml:"min_landlock_abi" json:"min_landlock_abi"`
	// Limits bound the server's resources (zero fields take the defaults).
	Limits Limits `yaml:"limits" json:"limits"`
}

// Mode says whether missing protections refuse a server or only show.
type Mode string

const (
	// ModeBestEffort starts the server with whatever the kernel allows.
	ModeBestEffort Mode = "best_effort"
	// ModeRequire refuses to start a server that would not be fully
	// confined (Confinement.Level "strong").
	ModeRequire Mode = "require"
)

// Egress is an allowlist of host names for a server's outgoing HTTPS. When
// Allow is not empty, the server (in its empty network namespace) finds an
// HTTP CONNECT proxy at 127.0.0.1:3128, named in HTTPS_PROXY and
// HTTP_PROXY; the gateway behind it connects only to allowed names, by name
// (IP literals are refused), on port 443 unless an entry names another, and
// never to an address a name resolves to inside the host's networks
// (loopback, RFC 1918, link-local and metadata, CGNAT, IPv6 equivalents).
type Egress struct {
	// Allow entries are "host", "*.domain" (subdomains only, not domain
	// itself) or either with ":port".
	Allow []string `yaml:"allow" json:"allow"`
	// Deny entries have the same form and win over Allow; without a port
	// they deny every port.
	Deny []string `yaml:"deny" json:"deny"`
}

// NetworkProxy is Confinement.Network for a server with network none and a
// running egress proxy.
const NetworkProxy = "proxy"

// EgressProxyAddr is where a server with an egress allowlist finds the proxy.
const EgressProxyAddr = "127.0.0.1:3128"

// Network says what network a server sees.
type Network string

const (
	// NetworkNone: an empty network namespace (loopback only); connecting
	// anywhere fails with ENETUNREACH.
	NetworkNone Network = "none"
	// NetworkHost: the gateway's own network, without confinement.
	NetworkHost Network = "host"
)

// Limits bound a server's resources. Memory and Processes use cgroup v2
// when the gateway can create a cgroup with those controllers, else
// RLIMIT_DATA (per process) and RLIMIT_NPROC (the server's own uid).
// RLIMIT_AS is never set: it breaks V8 (Node) at any useful value.
type Limits struct {
	MemoryMiB   int `yaml:"memory_mib" json:"memory_mib"`       // total memory (default 1024)
	Processes   int `yaml:"processes" json:"processes"`         // tasks, threads included (default 256)
	OpenFiles   int `yaml:"open_files" json:"open_files"`       // file descriptors per process (default 1024)
	CPUSeconds  int `yaml:"cpu_seconds" json:"cpu_seconds"`     // CPU time per process, then SIGXCPU/SIGKILL (0 = unlimited)
	FileSizeMiB int `yaml:"file_size_mib" json:"file_size_mib"` // largest file a process may write (default 1024)
}

// Defaults of Limits.
const (
	DefaultMemoryMiB   = 1024
	DefaultProcesses   = 256
	DefaultOpenFiles   = 1024
	DefaultFileSizeMiB = 1024
)

// DefaultReadOnly is what every server may read (and execute): the system
// program and library directories, the /etc files a dynamically linked
// program, a resolver and TLS need, and harmless devices. /etc as a whole is
// not listed: it holds /etc/shadow and host secrets.
var DefaultReadOnly = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf",
	"/etc/localtime", "/etc/ssl", "/etc/ca-certificates", "/etc/os-release", "/etc/mime.types",
	"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/full",
	"/proc", // the server's own fresh /proc: only its namespace's processes
}

// maskedDirs get a private empty tmpfs in the server's mount namespace: they
// hold host sockets (docker.sock, ssh-agent, D-Bus) and other users' files.
var maskedDirs = []string{"/tmp", "/var/tmp", "/run", "/dev/shm", "/dev/mqueue"}

// withDefaults returns p with its zero fields filled.
func (p Profile) withDefaults() Profile {
	if p.Mode == "" {
		p.Mode = ModeBestEffort
	}
	if p.Network == "" {
		p.Network = NetworkNone
	}
	if p.MinLandlockABI <= 0 {
		p.MinLandlockABI = 1
	}
	l := &p.Limits
	l.MemoryMiB = or(l.MemoryMiB, DefaultMemoryMiB)
	l.Processes = or(l.Processes, DefaultProcesses)
	l.OpenFiles = or(l.OpenFiles, DefaultOpenFiles)
	l.FileSizeMiB = or(l.FileSizeMiB, DefaultFileSizeMiB)
	return p
}

func or(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// ProfileError reports an unusable profile; Key names the field.
type ProfileError struct {
	Key     string
	Problem string
}

func (e *ProfileError) Error() string {
	return fmt.Sprintf("sandbox profile: %s: %s", e.Key, e.Problem)
}

// Validate checks p and returns the first problem as a *ProfileError.
func (p Profile) Validate() error {
	switch p.Mode {
	case "", ModeBestEffort, ModeRequire:
	default:
		return &ProfileError{"mode", fmt.Sprintf("%q is not a mode (use require or best_effort)", p.Mode)}
	}
	switch p.Network {
	case "", NetworkNone, NetworkHost:
	default:
		return &ProfileError{"network", fmt.Sprintf("%q is not a network (use none or host)", p.Network)}
	}
	if _, err := egress.ParseRules(p.Egress.Allow, p.Egress.Deny); err != nil {
		return &ProfileError{"egress", err.Error()}
	}
	if len(p.Egress.Allow) > 0 && p.Network == NetworkHost {
		return &ProfileError{"egress", "an allowlist needs network none (host already reaches everything)"}
	}
	for key, paths := range map[string][]string{"read_only": p.ReadOnly, "read_write": p.ReadWrite} {
		for _, path := range paths {
			if !strings.HasPrefix(path, "/") || strings.ContainsRune(path, 0) {
				return &ProfileError{key, fmt.Sprintf("%q is not an absolute path", path)}
			}
		}
	}
	if p.MinLandlockABI < 0 || p.MinLandlockABI > 64 {
		return &ProfileError{"min_landlock_abi", fmt.Sprintf("%d is not a Landlock ABI version", p.MinLandlockABI)}
	}
	l := p.Limits
	if slices.Min([]int{l.MemoryMiB, l.Processes, l.OpenFiles, l.CPUSeconds, l.FileSizeMiB}) < 0 {
		return &ProfileError{"limits", "a negative limit (use 0 for the default)"}
	}
	if l.Processes > 0 && l.Processes < 8 {
		return &ProfileError{"limits.processes", "below 8: a runtime cannot start its threads"}
	}
	return nil
}
