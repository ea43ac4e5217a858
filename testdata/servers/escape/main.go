// Command escape tries one way out of a sandbox, named by its first
// argument, and prints "escaped" (with detail) when it worked or "blocked:
// <error>" when the kernel refused. It is the escape suite's probe: each
// attempt is a real system call, not a simulation.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func int80(nr, a1 uintptr) uintptr

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: escape <attempt> [arg]")
		os.Exit(2)
	}
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	err := attempt(os.Args[1], arg)
	if err != nil {
		fmt.Printf("blocked: %v\n", err)
		return
	}
	fmt.Println("escaped")
}

func raw(nr uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

func attempt(name, arg string) error {
	switch name {
	case "int80": // i386 unshare(CLONE_NEWUSER): nr 310
		r := int80(310, unix.CLONE_NEWUSER)
		if int64(r) < 0 {
			return syscall.Errno(-int64(r))
		}
		return nil
	case "x32": // x32 getpid
		return raw(39 | 0x40000000)
	case "unshare-user":
		return unix.Unshare(unix.CLONE_NEWUSER)
	case "unshare-net":
		return unix.Unshare(unix.CLONE_NEWNET)
	case "clone-newns":
		return raw(unix.SYS_CLONE, unix.CLONE_NEWNS|uintptr(unix.SIGCHLD))
	case "clone3":
		return raw(unix.SYS_CLONE3, 0, 0)
	case "mount":
		return unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
	case "bpf":
		return raw(unix.SYS_BPF, 0, 0, 0)
	case "perf_event_open":
		return raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	case "keyctl":
		return raw(unix.SYS_KEYCTL, 0, 0)
	case "userfaultfd":
		return raw(unix.SYS_USERFAULTFD, 0)
	case "init_module":
		return raw(unix.SYS_INIT_MODULE, 0, 0, 0)
	case "kexec_load":
		return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)
	case "ptrace": // attach to another process of the sandbox (pid arg)
		pid, _ := strconv.Atoi(arg)
		return unix.PtraceAttach(pid)
	case "process_vm_readv":
		pid, _ := strconv.Atoi(arg)
		buf := make([]byte, 8)
		local := []unix.Iovec{{Base: &buf[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: 0x400000, Len: 8}}
		_, err := unix.ProcessVMReadv(pid, local, remote, 0)
		return err
	case "kill":
		pid, _ := strconv.Atoi(arg)
		return unix.Kill(pid, 0)
	case "mknod":
		return unix.Mknod("/tmp/mcpw-null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	case "tcp":
		c, err := net.DialTimeout("tcp", arg, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "proxy": // CONNECT arg (host:port) through $HTTPS_PROXY, then echo a line
		return viaProxy(arg)
	case "dns":
		addrs, err := net.LookupHost(arg)
		if err == nil && len(addrs) == 0 {
			return fmt.Errorf("no address")
		}
		return err
	case "tfo": // TCP Fast Open connect to arg (host:port)
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		addr, err := net.ResolveTCPAddr("tcp4", arg)
		if err != nil {
			return err
		}
		sa := &unix.SockaddrInet4{Port: addr.Port}
		copy(sa.Addr[:], addr.IP.To4())
		return unix.Sendto(fd, []byte("x"), unix.MSG_FASTOPEN, sa)
	case "mptcp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 262)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "raw":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "packet":
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "vsock":
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "route": // add a route through netlink-free ioctl: needs CAP_NET_ADMIN
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, _ := unix.NewIfreq("lo")
		ifr.SetUint16(0) // down
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	case "abstract":
		c, err := net.DialTimeout("unix", "@"+arg, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "unix":
		c, err := net.DialTimeout("unix", arg, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "symlink-write": // arg: a symlink in a writable dir pointing outside
		return os.WriteFile(arg, []byte("x"), 0o644)
	case "hardlink": // arg: target dir; link /etc/passwd into it
		return os.Link("/etc/passwd", arg+"/passwd")
	case "write-exe":
		f, err := os.OpenFile("/proc/self/exe", os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	case "read":
		_, err := os.ReadFile(arg)
		return err
	case "readdir":
		_, err := os.ReadDir(arg)
		return err
	case "write":
		return os.WriteFile(arg, []byte("x"), 0o644)
	case "setuid-root":
		return unix.Setuid(0)
	case "fork-bomb": // fork until refused; report how many
		n := 0
		for ; n < 100000; n++ {
			pid, _, e := unix.RawSyscall(unix.SYS_FORK, 0, 0, 0)
			if e != 0 {
				fmt.Printf("forked %d\n", n)
				return e
			}
			if pid == 0 {
				time.Sleep(time.Hour)
				os.Exit(0)
			}
		}
		return nil
	case "memhog": // allocate and touch 4 GiB
		var keep [][]byte
		for i := 0; i < 4096; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println(len(keep))
		return nil
	case "fds":
		for i := 0; i < 1<<20; i++ {
			if _, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
				fmt.Printf("opened %d\n", i)
				return err
			}
		}
		return nil
	case "fsize": // write 2 GiB to arg
		f, err := os.Create(arg)
		if err != nil {
			return err
		}
		defer f.Close()
		signalIgnore(unix.SIGXFSZ)
		buf := make([]byte, 1<<20)
		for i := 0; i < 2048; i++ {
			if _, err := f.Write(buf); err != nil {
				return err
			}
		}
		return nil
	case "cpu":
		for start := time.Now(); time.Since(start) < time.Minute; {
		}
		return nil
	}
	return fmt.Errorf("unknown attempt %q", name)
}

func signalIgnore(sig unix.Signal) {
	var act [4]uintptr
	act[0] = 1 // SIG_IGN
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act[0])), 0, 8, 0, 0)
}

// viaProxy asks the proxy named in HTTPS_PROXY for a tunnel to target and,
// once it is open, sends a line and expects it echoed.
func viaProxy(target string) error {
	proxy := strings.TrimPrefix(os.Getenv("HTTPS_PROXY"), "http://")
	if proxy == "" {
		return errors.New("no HTTPS_PROXY")
	}
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(c, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "ping\n" {
		return fmt.Errorf("tunnel open but no echo: %q, %v", line, err)
	}
	return nil
}
