package sandbox

import (
	"fmt"
	"io"
	"syscall"
	"time"
)

// Spec describes one server to start.
type Spec struct {
	// Name identifies the server in errors.
	Name string
	// Command is the program. It is never run through a shell; a name
	// without a slash is looked up in the PATH of the built environment
	// (absolute entries only), not the gateway's PATH.
	Command string
	// Args follow Command on the server's argv.
	Args []string
	// Dir is the server's working directory ("" = the gateway's).
	Dir string
	// Env holds the declared variables (config env and resolved secrets).
	// They are laid over a fixed base: PATH=/usr/local/bin:/usr/bin:/bin,
	// HOME=/tmp, LANG=C.UTF-8. The gateway's own environment is never
	// inherited. Spawn refuses, naming the key (never the value), empty
	// keys, keys with '=' or NUL, values with NUL or starting "()", and
	// variables that change which code runs or expose a host daemon
	// (LD_*, GLIBC_TUNABLES, NODE_OPTIONS, PYTHONPATH, GIT_*, BASH_ENV,
	// npm_config_registry, SSH_AUTH_SOCK, DOCKER_HOST, …). Credential
	// variables (GITHUB_TOKEN, AWS_*, …) pass: declaring them is the point.
	Env map[string]string
	// Stderr receives the server's stderr (nil = discarded). Under a
	// sandbox init, and for a non-*os.File writer, it is fed by a goroutine
	// that ends when the server is reaped.
	Stderr io.Writer
	// Profile is the confinement asked for (the zero Profile is the
	// default; see Profile).
	Profile Profile
	// EgressLog, if not nil, is told of every CONNECT request the server's
	// egress proxy answers (Profile.Egress), before the answer is sent. It
	// is called from the proxy's goroutines, concurrently, and should not
	// block.
	EgressLog func(EgressDecision)
	// StopGrace is how long Close waits after closing stdin, and again
	// after SIGTERM, before escalating (0 = 2s).
	StopGrace time.Duration
}

const defaultStopGrace = 2 * time.Second

// Confinement reports what Spawn actually achieved for a server.
type Confinement struct {
	// ProcessGroup: the server (or its init) leads its own process group,
	// which Close signals as a whole.
	ProcessGroup bool
	// PIDNamespace: the server runs under a sandbox init as PID 1 of a new
	// PID namespace, so the whole tree, setsid escapees included, dies with
	// the init. False when namespaces are unavailable or Init was not called.
	PIDNamespace bool
	// ParentDeathSignal: the process Spawn started is SIGKILLed if the
	// gateway dies. Alone it reaches only that process; with PIDNamespace
	// it takes the whole tree down.
	ParentDeathSignal bool
	// EnvironmentInherited: the server saw the gateway's environment.
	// Always false: the environment is built from Spec.Env and a fixed base.
	EnvironmentInherited bool

	// UserNamespace: the server runs in its own user namespace, as an
	// unprivileged uid of its own when the gateway is root.
	UserNamespace bool
	// MountNamespace: private mounts, a fresh /proc and empty tmpfs over
	// /tmp, /var/tmp, /run, /dev/shm.
	MountNamespace bool
	// NetworkNamespace: an empty network namespace (Network "none").
	NetworkNamespace bool
	// IPCNamespace and UTSNamespace: own System V IPC and host name.
	IPCNamespace bool
	UTSNamespace bool
	// Landlock is the Landlock ABI version enforcing the filesystem rules
	// (0: none, or below the profile's MinLandlockABI).
	Landlock int
	// Seccomp: the syscall denylist and the 32-bit/x32 guard are loaded.
	Seccomp bool
	// NoNewPrivs: setuid/file capabilities cannot raise privileges.
	NoNewPrivs bool
	// CapabilitiesDropped: empty capability sets, bounding set included.
	CapabilitiesDropped bool
	// Cgroup is "limits" (own cgroup v2 with memory and pids limits and
	// cgroup.kill), "kill" (own cgroup, cgroup.kill only; limits by rlimit)
	// or "" (no cgroup; limits by rlimit).
	Cgroup string
	// Network is the network the server sees: "none", "proxy" (none, plus
	// the egress proxy for Profile.Egress) or "host".
	Network string
	// Level sums it up: "strong" (every namespace, Landlock at or above the
	// floor, seccomp, no_new_privs, no capabilities), "partial" (some) or
	// "weak" (process group and parent-death signal only).
	Level string
	// Missing names the protections asked for and not achieved, with the
	// kernel's reason; empty at level strong.
	Missing []string
}

// ExitError reports a server that did not exit with status 0.
type ExitError struct {
	Name   string         // Spec.Name
	Code   int            // exit status; -1 if ended by a signal
	Signal syscall.Signal // signal that ended the server (or its init), else 0
}

func (e *ExitError) Error() string {
	if e.Code < 0 {
		return fmt.Sprintf("server %q killed by signal: %v", e.Name, e.Signal)
	}
	return fmt.Sprintf("server %q exited with status %d", e.Name, e.Code)
}
