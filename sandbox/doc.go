// Package sandbox starts stdio MCP servers confined away from the gateway and
// from each other, and stops them without leaving a process behind.
//
// The flow is: [Init] first thing in main; [Spawn] per server; the gateway
// speaks JSON-RPC over [Process.Stdin] and [Process.Stdout]; [Process.Close]
// runs the stop sequence (close stdin, SIGTERM, SIGKILL).
//
// Every server gets an environment built from scratch (never the gateway's),
// its own process group and a parent-death signal. When it can, Spawn also
// starts the server under a sandbox init — this binary re-executed as PID 1
// of fresh user, PID, mount, network, IPC, UTS and cgroup namespaces — which
// confines it as [Spec.Profile] asks (private mounts and /proc, Landlock,
// seccomp, no capabilities, rlimits, its own cgroup) so that the whole tree,
// double-forked daemons included, dies with the init. [Process.Confinement]
// tells what was achieved; nothing is silently assumed. [Check] reports what
// this kernel offers. A [Pool] keeps an init started ahead of need, so that
// a confined start costs little more than a bare one.
//
// Linux only.
package sandbox
