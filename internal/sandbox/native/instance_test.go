package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

func TestInstance(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	base, err := os.MkdirTemp("/var/tmp", "fluffy-instance-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, cs := filepath.Join(base, "ws"), filepath.Join(base, "cs")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Env: []string{"PATH=/usr/bin:/bin"}, Workspace: ws, ChangeSet: cs,
		Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64, Wall: 5 * time.Second}}
	in, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sh := func(s string) sandbox.Result {
		t.Helper()
		r, err := in.Exec(context.Background(), []string{"/bin/sh", "-c", s})
		if err != nil {
			t.Fatalf("exec %q: %v", s, err)
		}
		return r
	}
	if r := sh("echo one > a; echo out; echo err >&2"); r.ExitCode != 0 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
		t.Errorf("first: exit %d out %q err %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	if r := sh("cat a"); string(r.Stdout) != "one\n" {
		t.Errorf("the workspace did not keep the first command's write: %q %q", r.Stdout, r.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(cs, "a")); err != nil || string(b) != "one\n" {
		t.Errorf("change set: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a")); err == nil {
		t.Error("the workspace itself was written")
	}
	if r := sh("exit 3"); r.ExitCode != 3 {
		t.Errorf("exit %d", r.ExitCode)
	}
	// Nothing a command leaves running survives it.
	pid := strings.TrimSpace(string(sh("sleep 100 >/dev/null 2>&1 & echo $!").Stdout))
	if r := sh("kill -0 " + pid + " 2>/dev/null && echo alive || echo gone"); string(r.Stdout) != "gone\n" {
		t.Errorf("background process %s after its command: %q", pid, r.Stdout)
	}
	// The restrictions hold for every command.
	if r := sh("echo x > /etc/passwd || echo refused"); !strings.Contains(string(r.Stdout), "refused") {
		t.Errorf("wrote /etc/passwd: %q %q", r.Stdout, r.Stderr)
	}
	if r := sh("unshare -U true 2>/dev/null || echo refused"); string(r.Stdout) != "refused\n" {
		t.Errorf("unshare: %q", r.Stdout)
	}
	if _, err := in.Exec(context.Background(), []string{"no-such-command"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("missing command: %v", err)
	}
	if r := sh("true"); r.ExitCode != 0 {
		t.Errorf("after a missing command: exit %d", r.ExitCode)
	}
	if err := in.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := in.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := in.Exec(context.Background(), []string{"true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("exec after close: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(base, ".fluffy-work-*")); len(left) > 0 {
		t.Errorf("work directories left: %v", left)
	}
	assertNoCgroups(t, rt)
}

func TestInstanceTimeout(t *testing.T) {
	for _, stage1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("stage1=%v", stage1), func(t *testing.T) { testInstanceTimeout(t, stage1) })
	}
}

func testInstanceTimeout(t *testing.T, stage1 bool) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	setStage1(rt, stage1)
	in, err := rt.Start(context.Background(), sandbox.Spec{Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Wall: 300 * time.Millisecond, Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	start := time.Now()
	r, err := in.Exec(context.Background(), []string{"/bin/sh", "-c", "trap '' TERM; sleep 30 & sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Killed != sandbox.LimitTime || time.Since(start) > 10*time.Second {
		t.Errorf("killed %q after %v", r.Killed, time.Since(start))
	}
	if _, err := in.Exec(context.Background(), []string{"true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("exec after the timeout: %v", err)
	}
	assertNoCgroups(t, rt)
}

func TestInstanceCloseDuringExec(t *testing.T) {
	for _, stage1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("stage1=%v", stage1), func(t *testing.T) { testInstanceCloseDuringExec(t, stage1) })
	}
}

func testInstanceCloseDuringExec(t *testing.T, stage1 bool) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	setStage1(rt, stage1)
	in, err := rt.Start(context.Background(), sandbox.Spec{Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := in.Exec(context.Background(), []string{"sleep", "30"})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := in.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("exec during close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running 10 s after Close")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	assertNoCgroups(t, rt)
}

func assertNoCgroups(t *testing.T, rt *Runtime) {
	t.Helper()
	for _, d := range []string{rt.cgl.v1Memory, rt.cgl.v1Pids, rt.cgl.v2} {
		if d == "" {
			continue
		}
		// Ours only: other programs on the host may be running sandboxes.
		if left, _ := filepath.Glob(filepath.Join(d, fmt.Sprintf("fluffy-sandbox-%d-*", os.Getpid()))); len(left) > 0 {
			t.Errorf("cgroups left behind: %v", left)
		}
	}
}

// BenchmarkInstanceExecTrue runs /bin/true in a pre-warmed instance: the
// per-command cost once the sandbox exists.
func BenchmarkInstanceExecTrue(b *testing.B) {
	rt := newRuntime(b, Options{Init: smallInit(b)})
	in, err := rt.Start(context.Background(), sandbox.Spec{Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	benchMedian(b, func() error {
		_, err := in.Exec(context.Background(), []string{"/bin/true"})
		return err
	})
}
