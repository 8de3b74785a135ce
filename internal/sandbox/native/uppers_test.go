//go:build amd64 || arm64

package native

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers/upperstest"
)

// overlaysOn counts the mount namespaces of this host that have an
// overlay whose upper directory is named base (inside a sandbox the
// change set's folder may be mounted elsewhere: only the name is kept).
func overlaysOn(t *testing.T, base string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	ns := map[string]bool{}
	for _, p := range procs {
		id, err := os.Readlink(p + "/ns/mnt")
		if err != nil || ns[id] {
			continue
		}
		b, err := os.ReadFile(p + "/mountinfo")
		if err != nil {
			continue
		}
		for _, o := range upperstest.OverlayOptions(b) {
			if u, ok := o["upperdir"]; ok && filepath.Base(u) == base {
				ns[id] = true
			}
		}
	}
	return len(ns)
}

// mostOverlaysOn samples overlaysOn(base) until stop is called, which
// returns the most it saw.
func mostOverlaysOn(t *testing.T, base string) (stop func() int) {
	return upperstest.Most(func() int { return overlaysOn(t, base) })
}

// waitOverlays waits until n overlays are on the upper named base.
func waitOverlays(t *testing.T, base string, n int) {
	t.Helper()
	for range 2000 {
		if overlaysOn(t, base) == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("never %d overlays on the upper (is mountinfo read right?)", n)
}

// A run on the change set of a sandbox built ahead that it cannot use
// (another working directory) mounts its own overlay only once the one
// built ahead is gone, even when that one is slow to go (stopped, it is
// killed after aheadStopWait): while the run goes, never two overlays on
// the upper directory.
func TestNoTwoOverlaysOnOneUpperDiscard(t *testing.T) {
	rt := newRuntime(t, Options{})
	defer rt.Close()
	const base = "upper-one-at-a-time"
	ws, cs := varTmp(t), filepath.Join(varTmp(t), base)
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rt.PrepareNext(aheadSpec(ws, cs, "true"), nil); err != nil {
		t.Fatal(err)
	}
	pid1 := waitAhead(t, rt)
	waitOverlays(t, base, 1)
	if err := unix.Kill(pid1, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	other := aheadSpec(ws, cs, "sh", "-c", "pwd; sleep 0.3")
	other.Dir = filepath.Join(ws, "sub")
	stop := mostOverlaysOn(t, base)
	res, err := rt.Run(context.Background(), other)
	if n := stop(); n != 1 {
		t.Errorf("%d overlays on the upper at once, want 1", n)
	}
	if err != nil || string(res.Stdout) != other.Dir+"\n" {
		t.Fatalf("run: %v, stdout %q", err, res.Stdout)
	}
	if alive(pid1) {
		t.Errorf("PID 1 (%d) of the sandbox built ahead left", pid1)
	}
}

// Runtimes sharing Uppers: a run of one on the change set of a sandbox
// another built ahead has that one discarded before it mounts its own,
// and a runtime does not build ahead on a change set a run of another
// has mounted.
func TestNoTwoOverlaysOnOneUpperRuntimes(t *testing.T) {
	up := NewUppers()
	rt1, rt2 := newRuntime(t, Options{Uppers: up}), newRuntime(t, Options{Uppers: up})
	defer rt1.Close()
	defer rt2.Close()
	const base = "upper-shared"
	ws, cs := varTmp(t), filepath.Join(varTmp(t), base)
	discarded := make(chan struct{}, 1)
	if err := rt1.PrepareNext(aheadSpec(ws, cs, "true"), func() { discarded <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	pid1 := waitAhead(t, rt1)
	waitOverlays(t, base, 1)
	var prepared error
	stop := mostOverlaysOn(t, base)
	res, err := rt2.RunGated(context.Background(), aheadSpec(ws, cs, "sh", "-c", "echo two > f; cat f; sleep 0.3"), func() error {
		prepared = rt1.PrepareNext(aheadSpec(ws, cs, "true"), nil)
		return nil
	})
	if n := stop(); n != 1 {
		t.Errorf("%d overlays on the upper at once, want 1", n)
	}
	if err != nil || string(res.Stdout) != "two\n" {
		t.Fatalf("run: %v, stdout %q", err, res.Stdout)
	}
	select {
	case <-discarded:
	default:
		t.Error("the sandbox built ahead was not discarded before the run")
	}
	if alive(pid1) {
		t.Errorf("PID 1 (%d) of the sandbox built ahead left", pid1)
	}
	if prepared == nil {
		t.Error("a sandbox was built ahead on a change set another runtime's run had mounted")
	}
	if up.Held(cs) {
		t.Error("the upper is still held after the run")
	}
}

// A long-lived run on a change set (sandbox.Spec.Yield) is asked to end
// when another run needs the change set, and that run mounts its overlay
// only once it has: never two overlays at once.
func TestNoTwoOverlaysOnOneUpperYield(t *testing.T) {
	rt := newRuntime(t, Options{})
	defer rt.Close()
	const base = "upper-yield"
	ws, cs := varTmp(t), filepath.Join(varTmp(t), base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := aheadSpec(ws, cs, "sh", "-c", "echo long > f; sleep 60")
	yielded := make(chan struct{})
	long.Yield = func() {
		close(yielded)
		cancel()
	}
	ended := make(chan error, 1)
	go func() {
		_, err := rt.Run(ctx, long)
		ended <- err
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(cs, "f")); err == nil {
			break
		}
		if i == 2000 {
			t.Fatal("the long-lived run never wrote its file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop := mostOverlaysOn(t, base)
	res, err := rt.Run(context.Background(), aheadSpec(ws, cs, "sh", "-c", "cat f; sleep 0.3"))
	if n := stop(); n != 1 {
		t.Errorf("%d overlays on the upper at once, want 1", n)
	}
	if err != nil || string(res.Stdout) != "long\n" {
		t.Fatalf("run: %v, stdout %q", err, res.Stdout)
	}
	select {
	case <-yielded:
	default:
		t.Error("the long-lived run was not asked to yield")
	}
	select {
	case <-ended:
	default:
		t.Error("the run went while the long-lived one still had the change set")
	}
}
