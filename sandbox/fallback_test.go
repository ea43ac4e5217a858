package sandbox

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A namespace the kernel refuses (here CLONE_NEWUSER with CLONE_FS, always
// EINVAL) makes Spawn fall back to a direct child and say so.
func TestFallbackWhenNamespacesAreRefused(t *testing.T) {
	refused := []attempt{{attr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_FS}, userNS: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := spawn(ctx, Spec{Name: "srv", Command: "sh", Args: []string{"-c", "echo ok"}}, Profile{}.withDefaults(), refused, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := p.Confinement()
	if c.PIDNamespace || c.UserNamespace || c.Landlock != 0 || c.Seccomp || !c.ProcessGroup || !c.ParentDeathSignal ||
		c.Level != LevelWeak || len(c.Missing) == 0 || !strings.Contains(strings.Join(c.Missing, "; "), "user namespace: ") {
		t.Fatalf("Confinement() = %+v, want a weak confinement naming the refused user namespace", c)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}
