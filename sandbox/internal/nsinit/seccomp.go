package nsinit

import (
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM: administration, kernel-attack surface
// and escape routes no MCP server needs (Docker's default profile's
// admin-only set).
var deniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "chroot", "setns", "unshare",
	"fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree", "mount_setattr",
	"bpf", "perf_event_open", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"keyctl", "add_key", "request_key", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
	"iopl", "ioperm", "lookup_dcookie", "personality",
}

const (
	cloneNewMask   = 0x7E020000 // every CLONE_NEW* flag
	afVsock        = 40
	ipprotoMPTCP   = 262
	msgFastOpen    = 0x20000000
	auditArchX8664 = 0xC000003E
	x32SyscallBit  = 0x40000000
)

// loadSeccomp sets no_new_privs and loads, for every thread, the denylist
// and then the architecture guard.
func loadSeccomp() error {
	errno := func(e unix.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }
	cond := func(name string, arg uint32, op seccomp.Operation, v uint64) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{{Argument: arg, Operation: op, Value: v}}}
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: deniedSyscalls, Action: seccomp.ActionErrno},
			// clone3 passes its flags in memory a filter cannot read: ENOSYS
			// makes libc and Go fall back to clone, whose flags it can.
			{Names: []string{"clone3"}, Action: errno(unix.ENOSYS)},
			{NamesWithCondtions: []seccomp.NameWithConditions{
				cond("clone", 0, seccomp.BitsSet, cloneNewMask),
				cond("socket", 0, seccomp.Equal, afVsock),
				cond("sendto", 3, seccomp.BitsSet, msgFastOpen),
				cond("sendmsg", 2, seccomp.BitsSet, msgFastOpen),
				cond("sendmmsg", 3, seccomp.BitsSet, msgFastOpen),
			}, Action: seccomp.ActionErrno},
		},
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: policy}); err != nil {
		return err
	}
	return loadArchGuard()
}

// loadArchGuard kills a process making a syscall through another ABI (i386
// int $0x80), which the denylist would let through to its default action,
// and answers x32 syscalls with ENOSYS. It also refuses MPTCP sockets
// (which slipped past Landlock's TCP rules) with EPROTONOSUPPORT, so that
// runtimes fall back to TCP: the denylist cannot hold a second rule for
// socket(2) with another errno.
func loadArchGuard() error {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArchX8664, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipFalse: 3},
		bpf.LoadAbsolute{Off: 32, Size: 4}, // low half of args[2], the protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipprotoMPTCP, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("architecture guard: %w", e)
	}
	return nil
}
