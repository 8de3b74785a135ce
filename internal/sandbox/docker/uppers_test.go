package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers/upperstest"
)

// overlaysOn counts this process's overlay mounts that have cs as their
// upper directory or as one of their lower layers: with another overlay
// writing cs, a mount reading it as a lower layer is undefined as well.
func overlaysOn(t *testing.T, cs string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range upperstest.OverlayOptions(b) {
		if o["upperdir"] == cs || strings.Contains(":"+o["lowerdir"]+":", ":"+cs+":") {
			n++
		}
	}
	return n
}

// mostOverlaysOn samples overlaysOn(cs) until the returned func is
// called, which returns the most it saw.
func mostOverlaysOn(t *testing.T, cs string) func() int {
	return upperstest.Most(func() int { return overlaysOn(t, cs) })
}

// upperSpec is a spec on a new workspace and change set, and the change
// set's path as the mount table shows it.
func upperSpec(t *testing.T) (spec sandbox.Spec, cs string) {
	t.Helper()
	base := t.TempDir()
	ws, cs := filepath.Join(base, "ws"), filepath.Join(base, "cs")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("ws\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cs, 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := filepath.EvalSymlinks(cs)
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Spec{Workspace: ws, ChangeSet: cs, Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 30 * time.Second}}, cs
}

// A session's pool on a change set never has two overlays on it: not
// two pre-warmed containers, and not a pre-warmed one while a command of
// another shape (a read-only workspace) runs in a container of its own.
func TestPoolOneOverlayPerUpper(t *testing.T) {
	rt := engine(t)
	spec, cs := upperSpec(t)
	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec, Size: 2, Max: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stop := mostOverlaysOn(t, cs)
	if err := p.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := p.Idle(); n != 1 {
		t.Errorf("%d containers warm on one change set, want 1", n)
	}
	write := spec
	write.Argv = []string{"sh", "-c", "echo cs > f"}
	if res, err := p.Run(t.Context(), write); err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	ro := spec
	ro.WorkspaceReadOnly, ro.Argv = true, []string{"cat", "f"}
	res, err := p.Run(t.Context(), ro)
	if n := stop(); n != 1 {
		t.Errorf("%d overlays on the change set at once, want 1", n)
	}
	if err != nil || string(res.Stdout) != "cs\n" {
		t.Fatalf("read-only run: %v, stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
}

// A container on a change set another runtime's sandbox holds (a native
// one, through the Registry they share) asks that holder to go when it
// is idle and mounts nothing until it has let go: not even a read-only
// overlay, whose lower layer the holder could be writing.
func TestSharedUppersWaitsForHolder(t *testing.T) {
	engine(t)
	reg := uppers.NewRegistry()
	rt, err := docker.New(t.Context(), docker.Options{Image: testImage, Session: "test-" + t.Name(), StateDir: stateDir(), Uppers: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	spec, cs := upperSpec(t)
	other, err := reg.Acquire(t.Context(), cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	evicted := make(chan struct{})
	other.Idle(func() { close(evicted) })
	type result struct {
		res sandbox.Result
		err error
	}
	done := make(chan result, 1)
	spec.WorkspaceReadOnly, spec.Argv = true, []string{"cat", "f"}
	go func() {
		res, err := rt.Run(context.Background(), spec)
		done <- result{res, err}
	}()
	select {
	case <-evicted:
	case r := <-done:
		t.Fatalf("the container ran beside the holder of its change set (err %v)", r.err)
	}
	if n := overlaysOn(t, cs); n != 0 {
		t.Errorf("%d overlays on the change set before its holder let go", n)
	}
	if err := os.WriteFile(filepath.Join(cs, "f"), []byte("holder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other.Release()
	r := <-done
	if r.err != nil || string(r.res.Stdout) != "holder\n" {
		t.Fatalf("run: %v, stdout %q", r.err, r.res.Stdout)
	}
}
