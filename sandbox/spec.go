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
	// Stderr receives the server's stderr (nil = discarded). A non-*os.File
	// writer is fed by a goroutine that ends when the server is reaped.
	Stderr io.Writer
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
