package sandbox

import (
	"context"
	"io"
	"syscall"
	"testing"
	"time"
)

// A namespace the kernel refuses (here CLONE_NEWUSER with CLONE_FS, always
// EINVAL) makes Spawn fall back to a direct child and say so.
func TestFallbackWhenNamespacesAreRefused(t *testing.T) {
	refused := []*syscall.SysProcAttr{{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_FS}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := spawn(ctx, Spec{Name: "srv", Command: "sh", Args: []string{"-c", "echo ok"}}, refused)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := Confinement{ProcessGroup: true, ParentDeathSignal: true}
	if c := p.Confinement(); c != want {
		t.Fatalf("Confinement() = %+v, want %+v", c, want)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}
