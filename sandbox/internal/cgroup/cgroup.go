// Package cgroup gives each server a cgroup v2 of its own, below the
// gateway's, to kill its whole tree at once (cgroup.kill) and, where the
// memory and pids controllers can be enabled, to bound it.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Support is what the cgroup v2 hierarchy offers the gateway.
type Support struct {
	// Parent is the directory new cgroups are created in ("" = none).
	Parent string
	// Kill: cgroup.kill exists in new cgroups (Linux 5.14+).
	Kill bool
	// Limits: the memory and pids controllers are enabled for new cgroups.
	Limits bool
	// Reason says why Parent is empty or Limits is false.
	Reason string
}

var detect = sync.OnceValue(probe)

// Detect reports, once per process, what cgroup v2 offers.
func Detect() Support { return detect() }

func probe() Support {
	mnt := ""
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(m, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			mnt = m
			break
		}
	}
	if mnt == "" {
		return Support{Reason: "no cgroup v2 hierarchy mounted"}
	}
	own, err := ownCgroup()
	if err != nil {
		return Support{Reason: err.Error()}
	}
	removeStale(filepath.Join(mnt, own))
	parent := filepath.Join(mnt, own, fmt.Sprintf("mcp-warden-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return Support{Reason: fmt.Sprintf("cannot create %s: %v", parent, err)}
	}
	s := Support{Parent: parent}
	probe := filepath.Join(parent, "probe")
	if err := os.Mkdir(probe, 0o755); err == nil {
		_, err := os.Stat(filepath.Join(probe, "cgroup.kill"))
		s.Kill = err == nil
		_ = os.Remove(probe)
	}
	if !s.Kill {
		s.Reason = "no cgroup.kill (Linux < 5.14)"
	}
	ctrls, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	have := strings.Fields(string(ctrls))
	if !contains(have, "memory") || !contains(have, "pids") {
		s.Reason = strings.TrimPrefix(s.Reason+"; ", "; ") +
			fmt.Sprintf("memory and pids controllers not available in %s (have %q; hybrid hierarchy?)", mnt, have)
		return s
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
		s.Reason = fmt.Sprintf("cannot enable memory and pids controllers: %v", err)
		return s
	}
	s.Limits = true
	return s
}

// removeStale removes the empty cgroups of gateways that are gone (a
// SIGKILLed gateway cannot remove its own).
func removeStale(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "mcp-warden-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "mcp-warden-"))
		if err != nil || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		subs, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
		for _, s := range subs {
			_ = os.Remove(filepath.Dir(s))
		}
		_ = os.Remove(d)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ownCgroup returns this process's cgroup v2 path from /proc/self/cgroup.
func ownCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

var seq atomic.Uint64

// Group is one server's cgroup.
type Group struct {
	path string
	fd   int // open directory, for CLONE_INTO_CGROUP
}

// New creates an empty cgroup for one server; Limit bounds it. Close
// removes it.
func New(s Support, name string) (*Group, error) {
	if s.Parent == "" {
		return nil, errors.New(s.Reason)
	}
	path := filepath.Join(s.Parent, fmt.Sprintf("%s-%d", name, seq.Add(1)))
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, err
	}
	g := &Group{path: path, fd: -1}
	fd, err := unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.fd = fd
	return g, nil
}

// Limit sets the memory (without swap; the whole group is killed on OOM)
// and task limits. It needs Support.Limits. The group may already hold a
// process: a pre-started init is born in it before its server's limits are
// known.
func (g *Group) Limit(memoryBytes int64, pids int) error {
	for _, kv := range [][2]string{
		{"memory.max", strconv.FormatInt(memoryBytes, 10)},
		{"memory.swap.max", "0"},
		{"memory.oom.group", "1"},
		{"pids.max", strconv.Itoa(pids)},
	} {
		err := os.WriteFile(filepath.Join(g.path, kv[0]), []byte(kv[1]), 0)
		if err != nil && kv[0] != "memory.swap.max" { // absent without swap accounting
			return fmt.Errorf("set %s: %w", kv[0], err)
		}
	}
	return nil
}

// FD is the cgroup's directory, for SysProcAttr.CgroupFD.
func (g *Group) FD() int { return g.fd }

// Kill SIGKILLs every process in the cgroup, setsid escapees included.
func (g *Group) Kill() error {
	err := os.WriteFile(filepath.Join(g.path, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Close kills what is left, waits (bounded) for the cgroup to empty and
// removes it.
func (g *Group) Close() error {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	_ = g.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(g.path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", g.path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
