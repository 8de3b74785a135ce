package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// newSpareRuntime returns a runtime with n spares (the small init),
// closed at the end of the test with nothing of it left behind.
func newSpareRuntime(t testing.TB, n int) *Runtime {
	t.Helper()
	rt := newRuntime(t, Options{Init: smallInit(t), Spares: n})
	t.Cleanup(func() {
		pids := rt.sparePids()
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("spare init %d still exists after Close (%v)", pid, err)
			}
		}
		if tt, ok := t.(*testing.T); ok {
			assertNoCgroups(tt, rt)
		}
	})
	return rt
}

// sparePids returns the pids of the spares waiting now.
func (r *Runtime) sparePids() []int {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	var pids []int
	for _, sp := range r.pool.ready {
		pids = append(pids, sp.proc.Pid())
	}
	return pids
}

// waitSpares waits until n spares are ready (and their inits blocked
// reading their configuration, so that a run measures what a request
// that finds a warm spare costs).
func waitSpares(t testing.TB, rt *Runtime, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		pids := rt.sparePids()
		if len(pids) >= n && allWaiting(pids) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%d spares not ready after 20 s (have %d)", n, len(rt.sparePids()))
}

// allWaiting says whether every pid is an init waiting for its
// configuration: its main thread asleep in a pipe read.
func allWaiting(pids []int) bool {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if err != nil || !strings.Contains(string(b), "pipe_") {
			return false
		}
	}
	return true
}

// spareHasCgroup says whether the first waiting spare has a cgroup.
func (r *Runtime) spareHasCgroup() bool {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return len(r.pool.ready) > 0 && r.pool.ready[0].cg != nil
}

var shSpec = func(script string) sandbox.Spec {
	return sandbox.Spec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Wall: 20 * time.Second, Memory: 1 << 30, Pids: 256}}
}

// TestSpares: a run takes the waiting spare (the pool's counter), gets
// its own stdin, output, exit status and signal through it, its timings
// start at the request (not at the spare's start), and the pool is
// refilled for the next run.
func TestSpares(t *testing.T) {
	rt := newSpareRuntime(t, 1)
	rt.Prepare()
	waitSpares(t, rt, 1)
	// The spare has waited: a timeout counted from its start would
	// already have passed.
	time.Sleep(300 * time.Millisecond)
	for i, tc := range []struct {
		name   string
		spec   sandbox.Spec
		code   int
		signal int
		out    string
	}{
		{"exit status and output", shSpec("echo out; echo err >&2; exit 7"), 7, 0, "out\n"},
		{"signal", shSpec("kill -TERM $$"), -1, 15, ""},
		{"stdin", func() sandbox.Spec { s := shSpec("cat; echo ."); s.Stdin = strings.NewReader("fed in\n"); return s }(), 0, 0, "fed in\n.\n"},
		{"no stdin is /dev/null", shSpec(`[ "$(readlink /proc/self/fd/0)" = /dev/null ] && cat && echo null`), 0, 0, "null\n"},
		{"timeout from the request", func() sandbox.Spec {
			s := shSpec("sleep 0.1; echo slept")
			s.Limits.Wall = 250 * time.Millisecond
			return s
		}(), 0, 0, "slept\n"},
		{"no limits", func() sandbox.Spec { s := shSpec("echo free"); s.Limits = sandbox.Limits{}; return s }(), 0, 0, "free\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitSpares(t, rt, 1)
			used := rt.pool.used.Load()
			var tee bytes.Buffer
			tc.spec.Stdout = &tee
			res, err := rt.Run(context.Background(), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got, started := rt.SpareStats(); got != used+1 || started < got {
				t.Errorf("spares used %d → %d (started %d), want one more", used, got, started)
			}
			if res.ExitCode != tc.code || res.Signal != tc.signal || res.Killed != "" {
				t.Errorf("exit %d signal %d killed %q, want %d %d; stderr %q", res.ExitCode, res.Signal, res.Killed, tc.code, tc.signal, res.Stderr)
			}
			if string(res.Stdout) != tc.out || tee.String() != tc.out {
				t.Errorf("stdout %q (tee %q), want %q", res.Stdout, tee.String(), tc.out)
			}
			if i == 0 && string(res.Stderr) != "err\n" {
				t.Errorf("stderr %q", res.Stderr)
			}
			if res.Duration > 250*time.Millisecond+time.Second || res.Setup <= 0 || res.Setup > 250*time.Millisecond {
				t.Errorf("duration %v setup %v: not counted from the request", res.Duration, res.Setup)
			}
		})
	}
}

// TestSpareShape: a spec that needs a cgroup does not take a spare
// without one (it starts its own sandbox), and the refill then follows
// its shape, which the next such spec takes; a spec without limits
// takes a spare with a cgroup.
func TestSpareShape(t *testing.T) {
	rt := newSpareRuntime(t, 1)
	rt.detect()
	if !rt.cgl.available {
		t.Skip("no usable cgroup: every spare has the same shape")
	}
	free := shSpec("exit 0")
	free.Limits = sandbox.Limits{}
	// More processes than the limit allows (the init's threads count).
	limited := shSpec(`i=0; while [ $i -lt 40 ]; do sleep 0.3 & i=$((i+1)); done; wait`)
	limited.Limits.Pids = 24
	rt.refill(false)
	waitSpares(t, rt, 1)
	if rt.spareHasCgroup() {
		t.Fatal("the spare has a cgroup")
	}
	used := rt.pool.used.Load()
	res := run(t, rt, limited)
	if rt.pool.used.Load() != used {
		t.Error("a spec with limits took a spare without a cgroup")
	}
	if !res.HitLimit(sandbox.LimitPids) {
		t.Errorf("limits hit %v (stderr %q), want pids", res.Hit, res.Stderr)
	}
	// Refilled like the last spec: with a cgroup, the limit written at
	// the request.
	waitSpares(t, rt, 1)
	if !rt.spareHasCgroup() {
		t.Fatal("the refill has no cgroup")
	}
	res = run(t, rt, limited)
	if rt.pool.used.Load() != used+1 {
		t.Error("the spec did not take the spare shaped for it")
	}
	if !res.HitLimit(sandbox.LimitPids) {
		t.Errorf("limits hit %v (stderr %q), want pids: the limit was not written into the spare's cgroup", res.Hit, res.Stderr)
	}
	waitSpares(t, rt, 1)
	run(t, rt, free)
	if rt.pool.used.Load() != used+2 {
		t.Error("a spec without limits did not take the spare with a cgroup")
	}
}

// TestSpareKilled: a spare whose init was killed from outside is not
// used; the run starts its own sandbox and succeeds; the dead spare is
// reaped and its cgroup removed; a new spare replaces it.
func TestSpareKilled(t *testing.T) {
	for i := range 5 {
		t.Run(strconv.Itoa(i), testSpareKilled)
	}
}

func testSpareKilled(t *testing.T) {
	rt := newSpareRuntime(t, 1)
	rt.Prepare()
	waitSpares(t, rt, 1)
	pid := rt.sparePids()[0]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Dying or dead, not reaped: both the check before a spare is taken
	// and the one after its configuration was not read must catch it.
	used := rt.pool.used.Load()
	res := run(t, rt, shSpec("echo alive"))
	if string(res.Stdout) != "alive\n" || res.ExitCode != 0 {
		t.Errorf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if rt.pool.used.Load() != used {
		// Taken while dying: its configuration must be unread and the
		// run done on another sandbox (the output says so).
		t.Log("the spare was taken while dying")
	}
	waitSpares(t, rt, 1)
	if got := rt.sparePids()[0]; got == pid {
		t.Error("the dead spare is still in the pool")
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the dead spare %d was not reaped", pid)
	}
}

// TestSpareClose: Close kills and reaps the spares and removes their
// cgroups (newSpareRuntime's cleanup checks), a second Close is a no-op,
// and a run after Close works without spares.
func TestSpareClose(t *testing.T) {
	rt := newSpareRuntime(t, 2)
	rt.Prepare()
	waitSpares(t, rt, 2)
	pids := rt.sparePids()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("spare %d survived Close", pid)
		}
	}
	assertNoCgroups(t, rt)
	used := rt.pool.used.Load()
	if res := run(t, rt, shSpec("echo after")); string(res.Stdout) != "after\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if rt.pool.used.Load() != used || len(rt.sparePids()) != 0 || rt.pool.launched.Load() != 2 {
		t.Errorf("spares after Close: used %d, waiting %d, started %d", rt.pool.used.Load()-used, len(rt.sparePids()), rt.pool.launched.Load())
	}
}

// TestSpareIsolation: consecutive runs on spares do not see each
// other's /tmp, processes or files; nothing a run started survives it.
func TestSpareIsolation(t *testing.T) {
	rt := newSpareRuntime(t, 1)
	rt.Prepare()
	// Not under /tmp: the workspace appears inside at its host path.
	base, err := os.MkdirTemp("/var/tmp", "fluffy-spare-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := strconv.Itoa(1_000_000 + os.Getpid())
	for i, cs := range []string{"cs1", "cs2"} {
		waitSpares(t, rt, 1)
		used := rt.pool.used.Load()
		spec := shSpec(fmt.Sprintf(`ls /tmp; ls; ls /proc | grep -c '^[0-9]*$'; echo secret%[1]d > /tmp/t; echo file%[1]d > f%[1]d; (trap "" TERM; sleep %[2]s) & echo started`, i, marker))
		spec.Workspace, spec.ChangeSet = ws, filepath.Join(base, cs)
		res := run(t, rt, spec)
		if rt.pool.used.Load() != used+1 {
			t.Fatal("no spare taken")
		}
		// /tmp and the workspace are empty, and the shell sees itself,
		// ls, ps and grep (or fewer), never the sleep of the last run.
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 2 || lines[1] != "started" {
			t.Fatalf("run %d saw %q (stderr %q)", i, res.Stdout, res.Stderr)
		}
		if n, _ := strconv.Atoi(lines[0]); n > 4 {
			t.Errorf("run %d sees %d processes", i, n)
		}
		if n := sandboxtest.CountProcs(marker); n > 0 {
			t.Errorf("%d processes of run %d outlived it", n, i)
		}
		if b, err := os.ReadFile(filepath.Join(base, cs, fmt.Sprintf("f%d", i))); err != nil || string(b) != fmt.Sprintf("file%d\n", i) {
			t.Errorf("change set %s: %q %v", cs, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "cs2", "f0")); err == nil {
		t.Error("the second change set has the first run's file")
	}
	if left, _ := filepath.Glob(filepath.Join(base, ".fluffy-work-*")); len(left) > 0 {
		t.Errorf("work directories left: %v", left)
	}
}

// TestSpareRuns: many sequential and concurrent runs on 1 and 2 spares
// each get their own output and status (run it with -race).
func TestSpareRuns(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("spares=%d", n), func(t *testing.T) {
			rt := newSpareRuntime(t, n)
			rt.Prepare()
			for i := range 10 {
				res := run(t, rt, shSpec(fmt.Sprintf("echo seq%d; exit %d", i, i)))
				if string(res.Stdout) != fmt.Sprintf("seq%d\n", i) || res.ExitCode != i {
					t.Errorf("run %d: exit %d stdout %q", i, res.ExitCode, res.Stdout)
				}
			}
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 4 {
						want := fmt.Sprintf("g%d-%d", g, i)
						spec := shSpec("cat; echo " + want)
						spec.Stdin = strings.NewReader(want + "-in\n")
						res, err := rt.Run(context.Background(), spec)
						if err != nil {
							t.Errorf("%s: %v", want, err)
							continue
						}
						if string(res.Stdout) != want+"-in\n"+want+"\n" {
							t.Errorf("%s: stdout %q", want, res.Stdout)
						}
					}
				}()
			}
			wg.Wait()
			if rt.pool.used.Load() == 0 {
				t.Error("no run took a spare")
			}
			t.Logf("%d of 26 runs on a spare", rt.pool.used.Load())
		})
	}
}

// TestSpareGate: on a spare the gate still comes before the command
// (a refused gate runs nothing), and RunEarly hands the result over.
func TestSpareGate(t *testing.T) {
	rt := newSpareRuntime(t, 1)
	rt.Prepare()
	waitSpares(t, rt, 1)
	base, err := os.MkdirTemp("/var/tmp", "fluffy-spare-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	ws, cs := filepath.Join(base, "ws"), filepath.Join(base, "cs")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := shSpec("echo > ran")
	spec.Workspace, spec.ChangeSet = ws, cs
	_, err = rt.RunGated(context.Background(), spec, func() error { return errors.New("refused") })
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(cs, "ran")); err == nil {
		t.Fatal("the command ran although the gate refused")
	}
	waitSpares(t, rt, 1)
	if res := run(t, rt, spec); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(cs, "ran")); err != nil {
		t.Fatalf("the command did not run with the gate open: %v", err)
	}
	waitSpares(t, rt, 1)
	used := rt.pool.used.Load()
	var early []sandbox.Result
	gated := false
	res, err := rt.RunEarly(context.Background(), shSpec("echo hi; exit 4"), func() error { gated = true; return nil }, func(r sandbox.Result) { early = append(early, r) })
	if err != nil || !gated || res.ExitCode != 4 || len(early) != 1 || early[0].ExitCode != 4 || rt.pool.used.Load() != used+1 {
		t.Errorf("err %v gated %v exit %d early %v used %d", err, gated, res.ExitCode, early, rt.pool.used.Load()-used)
	}
}

// TestSpareTrace: a traced run on a spare reports the request's stages
// only (not the spare's start).
func TestSpareTrace(t *testing.T) {
	var buf bytes.Buffer
	rt := newRuntime(t, Options{Init: smallInit(t), Spares: 1, Trace: &buf})
	defer rt.Close()
	rt.Prepare()
	waitSpares(t, rt, 1)
	time.Sleep(100 * time.Millisecond)
	run(t, rt, shSpec("exit 0"))
	out := buf.String()
	if !strings.Contains(out, "spare taken") || strings.Contains(out, "go runtime started") || !strings.Contains(out, "init:   config read") {
		t.Errorf("trace:\n%s", out)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 3 && f[len(f)-1] == "ms" && (f[0] == "parent:" || f[0] == "init:") {
			if v, err := strconv.ParseFloat(f[len(f)-2], 64); err == nil && v > 90 {
				t.Errorf("total %v ms: the spare's wait counted: %s", v, sc.Text())
			}
		}
	}
}

// TestSparesDieWithOwner: the spares of a process that dies (SIGKILL:
// no Close) die too (the parent-death signal of the thread that cloned
// them).
func TestSparesDieWithOwner(t *testing.T) {
	if os.Getenv("FLUFFY_SPARE_OWNER") == "1" {
		rt := newRuntime(t, Options{Init: smallInit(t), Spares: 2})
		rt.Prepare()
		waitSpares(t, rt, 2)
		fmt.Println("pids", rt.sparePids())
		time.Sleep(time.Minute)
		return
	}
	self, _ := os.Executable()
	cmd := exec.Command(self, "-test.run=^TestSparesDieWithOwner$", "-test.v")
	cmd.Env = append(os.Environ(), "FLUFFY_SPARE_OWNER=1", "FLUFFY_SBXTEST_INIT="+smallInit(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "pids ["); ok {
			for _, f := range strings.Fields(strings.TrimSuffix(rest, "]")) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 2 {
		t.Fatalf("the owner reported spares %v", pids)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("spare %d outlived its owner", pid)
		}
	}
	// Its cgroups cannot be removed by a process killed outright (as for
	// a run in progress): clean up after it.
	rt := newRuntime(t, Options{})
	for _, d := range []string{rt.cgl.v1Memory, rt.cgl.v1Pids, rt.cgl.v2} {
		if d == "" {
			continue
		}
		left, _ := filepath.Glob(filepath.Join(d, fmt.Sprintf("fluffy-sandbox-%d-*", cmd.Process.Pid)))
		if err := (&cgroup{dirs: left}).remove(); err != nil {
			t.Errorf("the dead owner's cgroups: %v", err)
		}
	}
}

// alive says whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !bytes.Contains(b, []byte(") Z "))
}

// TestSuiteSpares runs the adversarial suite on spares: every case takes
// a spare started for the previous one (fork bomb and memory hog with
// their limits written into the spare's cgroup, the timeout counted
// from the request, /tmp full, writes outside the change set, the host
// environment absent).
func TestSuiteSpares(t *testing.T) {
	rt := newSpareRuntime(t, 2)
	rt.Prepare()
	sandboxtest.Run(t, sandboxtest.Options{Runtime: rt, MemoryKills: rt.cgl.available})
	if rt.pool.used.Load() == 0 {
		t.Error("no case ran on a spare")
	}
	t.Logf("%d cases on a spare", rt.pool.used.Load())
}

// BenchmarkRunTrueSpare runs /bin/true on a spare (one, as a sandbox
// server would keep) that is ready when the run starts, as it is for
// requests a few milliseconds apart: the wait for it is not timed. The
// CPU figure is everything's (the spare's start too) per run.
func BenchmarkRunTrueSpare(b *testing.B) {
	benchSpare(b, func(rt *Runtime, spec sandbox.Spec) (time.Duration, error) {
		t := time.Now()
		_, err := rt.Run(context.Background(), spec)
		return time.Since(t), err
	}, true)
}

// BenchmarkRunTrueSpareEarly is BenchmarkRunTrueSpare timed to the
// moment RunEarly hands the result over (what a server answers on; the
// teardown follows).
func BenchmarkRunTrueSpareEarly(b *testing.B) {
	benchSpare(b, func(rt *Runtime, spec sandbox.Spec) (d time.Duration, err error) {
		t := time.Now()
		_, err = rt.RunEarly(context.Background(), spec, nil, func(sandbox.Result) { d = time.Since(t) })
		return d, err
	}, true)
}

// BenchmarkRunTrueSpareB2B runs back to back: the spare taken may still
// be starting (its refill began when the previous command's status came
// in).
func BenchmarkRunTrueSpareB2B(b *testing.B) {
	benchSpare(b, func(rt *Runtime, spec sandbox.Spec) (time.Duration, error) {
		t := time.Now()
		_, err := rt.Run(context.Background(), spec)
		return time.Since(t), err
	}, false)
}

func benchSpare(b *testing.B, op func(*Runtime, sandbox.Spec) (time.Duration, error), wait bool) {
	rt := newSpareRuntime(b, 1)
	rt.Prepare()
	spec := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}}
	if os.Getenv("FLUFFY_BENCH_NOCGROUP") == "1" {
		spec.Limits = sandbox.Limits{}
	}
	waitSpares(b, rt, 1)
	var ds []time.Duration
	cpu0 := cpuTime()
	for b.Loop() {
		if wait {
			b.StopTimer()
			waitSpares(b, rt, 1)
			b.StartTimer()
		}
		d, err := op(rt, spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	reportMedian(b, ds, cpuTime()-cpu0)
	b.Logf("%d of %d runs on a spare", rt.pool.used.Load(), len(ds))
}
