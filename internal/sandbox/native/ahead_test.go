//go:build amd64 || arm64

package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// aheadSpec is a run's spec on workspace ws and change set cs, with
// every kind of limit.
func aheadSpec(ws, cs string, argv ...string) sandbox.Spec {
	return sandbox.Spec{Argv: argv, Env: []string{"PATH=/usr/bin:/bin", "WHO=request"}, Workspace: ws, ChangeSet: cs, Dir: ws,
		Limits: sandbox.Limits{Wall: time.Minute, Memory: 1 << 30, Pids: 100, OpenFiles: 1234, FileSize: 5 << 20, CPU: time.Minute}}
}

// waitAhead waits until the sandbox built ahead waits at its gate (its
// PID 1, a child of this process, blocked reading directGate), so that
// a run takes a finished one, and returns PID 1's pid.
func waitAhead(t *testing.T, rt *Runtime) int {
	t.Helper()
	rt.ahead.mu.Lock()
	a := rt.ahead.a
	rt.ahead.mu.Unlock()
	if a == nil {
		t.Fatal("nothing built ahead")
	}
	for range 2000 {
		tasks, _ := filepath.Glob("/proc/self/task/*/children")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, p := range strings.Fields(string(b)) {
				w, err := os.ReadFile("/proc/" + p + "/wchan")
				if err == nil && strings.Contains(string(w), "unix_stream") {
					pid, _ := strconv.Atoi(p)
					return pid
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the sandbox built ahead never reached its gate")
	return 0
}

// A sandbox built ahead waits at its gate for its request, however long
// that takes, and then runs the request's command with the request's
// argv, environment and rlimits (none of which it had), its writes in
// the change set.
func TestAheadRunsItsRequest(t *testing.T) {
	rt := newRuntime(t, Options{})
	defer rt.Close()
	ws, cs := varTmp(t), filepath.Join(varTmp(t), "upper")
	spec := aheadSpec(ws, cs, "sh", "-c", `echo "$WHO $0 $1"; ulimit -n; ulimit -f; echo out > new.txt`, "a1", "a2")
	if err := rt.PrepareNext(aheadSpec(ws, cs, "/bin/false"), nil); err != nil {
		t.Fatal(err)
	}
	pid1 := waitAhead(t, rt)
	time.Sleep(50 * time.Millisecond) // had it not waited, it would have run /bin/false by now
	res, err := rt.Run(context.Background(), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v, exit %d, stderr %q", err, res.ExitCode, res.Stderr)
	}
	if used, _ := rt.AheadStats(); used != 1 {
		t.Fatalf("%d runs on a sandbox built ahead, want 1", used)
	}
	// The same as a sandbox started on demand gives.
	cs2 := filepath.Join(varTmp(t), "upper")
	want, err := rt.Run(context.Background(), aheadSpec(ws, cs2, spec.Argv...))
	if err != nil || !strings.HasPrefix(string(want.Stdout), "request a1 a2\n1234\n") {
		t.Fatalf("on demand: %v, stdout %q", err, want.Stdout)
	}
	if string(res.Stdout) != string(want.Stdout) {
		t.Errorf("stdout %q, want %q (on demand)", res.Stdout, want.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(cs, "new.txt")); err != nil || string(b) != "out\n" {
		t.Errorf("change set: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Error("the write reached the workspace")
	}
	if alive(pid1) {
		t.Errorf("PID 1 (%d) of the sandbox built ahead outlived its run", pid1)
	}
	assertNoCgroups(t, rt)
}

// A run on the change set of a sandbox built ahead, in another shape
// (here another working directory), discards it and starts its own; a
// refused gate runs nothing; a PID 1 killed while it waits is noticed;
// closing the runtime discards what waits. Each discard calls back and
// leaves no process, cgroup or work directory.
func TestAheadDiscarded(t *testing.T) {
	rt := newRuntime(t, Options{})
	ws, cs := varTmp(t), filepath.Join(varTmp(t), "upper")
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	discards := make(chan struct{}, 8)
	prepare := func() int {
		t.Helper()
		if err := rt.PrepareNext(aheadSpec(ws, cs, "true"), func() { discards <- struct{}{} }); err != nil {
			t.Fatal(err)
		}
		return waitAhead(t, rt)
	}
	discarded := func(what string, pid1 int) {
		t.Helper()
		select {
		case <-discards:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no discard reported", what)
		}
		if alive(pid1) {
			t.Errorf("%s: PID 1 (%d) left", what, pid1)
		}
		if m, _ := filepath.Glob(filepath.Join(filepath.Dir(cs), ".fluffy-work-*")); len(m) > 0 {
			t.Errorf("%s: work directories left: %v", what, m)
		}
		assertNoCgroups(t, rt)
	}

	pid1 := prepare()
	other := aheadSpec(ws, cs, "pwd")
	other.Dir = filepath.Join(ws, "sub")
	res, err := rt.Run(context.Background(), other)
	if err != nil || string(res.Stdout) != other.Dir+"\n" {
		t.Fatalf("another shape: %v, stdout %q", err, res.Stdout)
	}
	discarded("another shape", pid1)

	pid1 = prepare()
	refused := errors.New("refused")
	_, err = rt.RunGated(context.Background(), aheadSpec(ws, cs, "sh", "-c", "echo ran > ran.txt"), func() error { return refused })
	if !errors.Is(err, refused) {
		t.Errorf("refused gate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cs, "ran.txt")); err == nil {
		t.Error("the command ran past a refused gate")
	}
	if alive(pid1) {
		t.Errorf("refused gate: PID 1 (%d) left", pid1)
	}

	pid1 = prepare()
	rt.ahead.mu.Lock()
	a := rt.ahead.a
	rt.ahead.mu.Unlock()
	if err := unix.Kill(pid1, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Until its clone has returned, the death is not known (a run that
	// takes it then fails, as one whose sandbox is killed from outside).
	for len(a.d.started) == 0 {
		time.Sleep(time.Millisecond)
	}
	res, err = rt.Run(context.Background(), aheadSpec(ws, cs, "echo", "fine"))
	if err != nil || string(res.Stdout) != "fine\n" {
		t.Fatalf("after PID 1 was killed: %v, stdout %q", err, res.Stdout)
	}
	discarded("PID 1 killed", pid1)

	// Stopped, it cannot go on when released: the run's wall limit
	// still ends it.
	pid1 = prepare()
	if err := unix.Kill(pid1, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	short := aheadSpec(ws, cs, "true")
	short.Limits.Wall = 300 * time.Millisecond
	res, err = rt.Run(context.Background(), short)
	if err != nil || res.Killed != sandbox.LimitTime {
		t.Errorf("PID 1 stopped: %v, killed %q, want the timeout", err, res.Killed)
	}
	if alive(pid1) {
		t.Errorf("PID 1 stopped: %d left", pid1)
	}

	// Stopped, it cannot read that it is discarded: it is killed.
	pid1 = prepare()
	if err := unix.Kill(pid1, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	discarded("close, PID 1 stopped", pid1)
	if used, _ := rt.AheadStats(); used != 2 {
		t.Errorf("%d runs on a sandbox built ahead, want 2 (the refused one, the stopped one)", used)
	}
}

// BenchmarkRunTrueWorkspace runs /bin/true with a workspace overlay and
// a change set (as `fluffy sandbox run` does), started on demand;
// BenchmarkRunTrueAhead the same on a sandbox built ahead (PrepareNext,
// untimed, 20 ms before: a request that comes a moment after the one
// before, as a model's next command does). median-ms is the run's wall
// time; cpu-ms/op counts the build too.
func BenchmarkRunTrueWorkspace(b *testing.B) { benchWorkspace(b, false) }

func BenchmarkRunTrueAhead(b *testing.B) { benchWorkspace(b, true) }

func benchWorkspace(b *testing.B, ahead bool) {
	rt := newRuntime(b, Options{})
	defer rt.Close()
	ws, csDir := b.TempDir(), b.TempDir()
	var ds []time.Duration
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		i++
		spec := aheadSpec(ws, filepath.Join(csDir, strconv.Itoa(i)), "/bin/true")
		if ahead {
			if err := rt.PrepareNext(spec, nil); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
		t := time.Now()
		if _, err := rt.Run(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	if used, _ := rt.AheadStats(); ahead && used != int64(len(ds)) {
		b.Fatalf("%d of %d runs on a sandbox built ahead", used, len(ds))
	}
	reportMedian(b, ds, cpuTime()-cpu0)
}

// A run without a workspace (no change set to bind it) takes a sandbox
// built ahead without one, and a run with a workspace does not.
func TestAheadNoWorkspace(t *testing.T) {
	rt := newRuntime(t, Options{})
	defer rt.Close()
	spec := sandbox.Spec{Argv: []string{"sh", "-c", "pwd; echo $WHO"}, Env: []string{"PATH=/usr/bin:/bin", "WHO=req"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 64}}
	if err := rt.PrepareNext(sandbox.Spec{Argv: []string{"true"}, Limits: spec.Limits}, nil); err != nil {
		t.Fatal(err)
	}
	waitAhead(t, rt)
	res, err := rt.Run(context.Background(), spec)
	if err != nil || string(res.Stdout) != "/\nreq\n" {
		t.Fatalf("run: %v, stdout %q", err, res.Stdout)
	}
	if used, _ := rt.AheadStats(); used != 1 {
		t.Fatalf("%d runs on a sandbox built ahead, want 1", used)
	}
	if err := rt.PrepareNext(spec, nil); err != nil {
		t.Fatal(err)
	}
	ws, cs := varTmp(t), filepath.Join(varTmp(t), "upper")
	if res, err := rt.Run(context.Background(), aheadSpec(ws, cs, "true")); err != nil || res.ExitCode != 0 {
		t.Fatalf("a workspace run: %v, exit %d", err, res.ExitCode)
	}
	if used, _ := rt.AheadStats(); used != 1 {
		t.Errorf("a workspace run took the sandbox built without one")
	}
}

// varTmp is a directory in /var/tmp, removed after the test: the
// unprivileged rerun (TestSuiteUnprivileged) cannot write t.TempDir's.
func varTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-ahead-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWork(dir) })
	return dir
}

// alive says whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !bytes.Contains(b, []byte(") Z "))
}
