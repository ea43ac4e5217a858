// Package nsinit is the sandbox init: the copy of the gateway binary that
// runs as PID 1 of a server's PID namespace (like tini), starts the server as
// its only child and reaps every process of the namespace. A SIGTERM, SIGINT
// or SIGHUP is broadcast to the whole namespace (kill(-1)), and the init then
// gives every process up to the grace period to finish. Otherwise it exits as
// soon as the server does, with the server's status, and the kernel kills the
// rest of the namespace.
//
// The parent (package sandbox) and the init talk over two inherited pipes:
// a Request arrives as JSON on fd RequestFD, and Reports go back as JSON
// lines on fd ReportFD. Nothing travels on argv, which is world-readable.
package nsinit

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The init is selected by an argv[0] and argv[1] no shell or user would type
// together, plus pipes at fds 3 and 4 (see Requested); the binary's own name is
// not consulted, it is always /proc/self/exe.
const (
	Arg0 = "mcp-warden-sandbox-init"
	Arg1 = "__mcp_sandbox_init"
)

// File descriptors inherited by the init (os/exec ExtraFiles order).
const (
	RequestFD = 3 // read end: one JSON Prepare, one JSON Request, then EOF
	ReportFD  = 4 // write end: JSON Reports
	// EgressFD is a unix socket, present when Confine.EgressListen is set:
	// the init sends the listening egress socket over it (SCM_RIGHTS).
	EgressFD = 5
)

// MaxRequestSize bounds what the init reads from RequestFD.
const MaxRequestSize = 16 << 20

// Prepare comes first on RequestFD, as soon as the init is started: what it
// can set up before it knows its server, because it depends only on the
// namespaces it was cloned into. An init started ahead of need does it
// while it waits.
type Prepare struct {
	// PrivateMounts: the init has its own mount namespace: stop mount
	// propagation to and from the host and mount a fresh /proc.
	PrivateMounts bool `json:"private_mounts,omitempty"`
	// LoopbackUp: bring lo up in the init's own network namespace.
	LoopbackUp bool `json:"loopback_up,omitempty"`
}

// Request is everything the init needs to start the server. Env may hold
// secrets: it is never logged.
type Request struct {
	Command string   `json:"command"` // as configured; resolved with Env's PATH
	Args    []string `json:"args"`    // full argv, Args[0] included
	Env     []string `json:"env"`     // complete environment, KEY=value
	Dir     string   `json:"dir,omitempty"`
	// Grace bounds how long the init waits, after a stop signal, for the
	// rest of the namespace once the server itself has exited.
	Grace time.Duration `json:"grace"`
	// Confine is the confinement to set up before starting the server;
	// nil for a PID namespace only.
	Confine *Confine `json:"confine,omitempty"`
	// Trace asks for the time each start-up stage ended (Report.Stages),
	// to profile the spawn overhead.
	Trace bool `json:"trace,omitempty"`
}

// Stage is one traced start-up stage of the init: its name and the
// wall-clock time (Unix nanoseconds) it ended, comparable with the parent's
// clock.
type Stage struct {
	Name string `json:"name"`
	At   int64  `json:"at"`
}

// Confine is what the init sets up, in this order: mounts, host name,
// rlimits, capabilities, Landlock, seccomp, credentials.
type Confine struct {
	// Mount: the init is in its own mount namespace, made private (see
	// Prepare): mount an empty tmpfs over each of MaskDirs, with Expose
	// paths (under them) mounted back.
	Mount    bool     `json:"mount,omitempty"`
	MaskDirs []string `json:"mask_dirs,omitempty"`
	Expose   []string `json:"expose,omitempty"`
	// ProtectIn are the writable directories whose files that run code
	// or configure tools (ProtectedNames) are mounted read-only.
	ProtectIn []string `json:"protect_in,omitempty"`
	// Hostname is set when the init has its own UTS namespace.
	Hostname string `json:"hostname,omitempty"`
	// DenyTCP: no network was asked for but there is no network namespace
	// to give it, so Landlock refuses every TCP bind and connect instead.
	DenyTCP bool `json:"deny_tcp,omitempty"`
	// EgressListen, if set, is the loopback TCP address the init listens
	// on in its network namespace; it hands the listening socket to the
	// gateway's proxy over EgressFD and keeps nothing open itself.
	EgressListen string `json:"egress_listen,omitempty"`
	// Rlimits are set on the init and inherited by the server.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// ReadOnly and ReadWrite are the Landlock rules; the server's program
	// and its interpreter chain are added by the init.
	Landlock       bool     `json:"landlock,omitempty"`
	MinLandlockABI int      `json:"min_landlock_abi,omitempty"`
	ReadOnly       []string `json:"read_only,omitempty"`
	ReadWrite      []string `json:"read_write,omitempty"`
	// Seccomp loads the denylist and the architecture guard.
	Seccomp bool `json:"seccomp,omitempty"`
	// UID and GID the server runs as inside the namespace (-1: the init's).
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Rlimit is one resource limit (a RLIMIT_* number).
type Rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"` // soft and hard
}

// Achieved is what the init actually set up, reported with Started.
type Achieved struct {
	Mount               bool     `json:"mount,omitempty"`
	Landlock            int      `json:"landlock,omitempty"` // ABI version enforced
	Seccomp             bool     `json:"seccomp,omitempty"`
	NoNewPrivs          bool     `json:"no_new_privs,omitempty"`
	CapabilitiesDropped bool     `json:"capabilities_dropped,omitempty"`
	Missing             []string `json:"missing,omitempty"` // protections that failed, with the reason
}

// Report is one message from the init. The first is Waiting, sent once the
// init is up and about to read its request; then comes either Started or
// Failed; a started init sends Exited last, just before it exits.
type Report struct {
	Waiting bool `json:"waiting,omitempty"`
	Started bool `json:"started,omitempty"`
	Pid     int  `json:"pid,omitempty"` // server pid inside the namespace
	// Achieved comes with Started when the request asked to Confine.
	Achieved *Achieved `json:"achieved,omitempty"`
	Failed   string    `json:"failed,omitempty"`
	// Stages comes with Started when the request asked to Trace.
	Stages []Stage `json:"stages,omitempty"`
	Exited bool    `json:"exited,omitempty"`
	Code   int     `json:"code,omitempty"`   // exit status, -1 if signalled
	Signal int     `json:"signal,omitempty"` // signal that ended the server
}

// Exit statuses of the init itself when the server could not be started.
const (
	ExitInitFailed  = 125 // the init could not read its request or set up
	ExitCannotStart = 127 // program not found or exec failed
)

// Requested reports whether this process was started as the sandbox init.
func Requested() bool {
	return len(os.Args) == 2 && os.Args[0] == Arg0 && os.Args[1] == Arg1 &&
		isPipe(RequestFD) && isPipe(ReportFD)
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}
