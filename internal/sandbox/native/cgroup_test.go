package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestCgroupBornInside checks where the init starts: inside the run's
// cgroup (v1: cloned by a thread visiting it; v2: CLONE_INTO_CGROUP), so
// the cgroup namespace's root is the run's own cgroup and the command
// sees "/" for memory and pids. A process joined after its start (the
// fallback, forced here by clearing v1Threads) sees its cgroup below the
// namespace root. Either way the limits apply: sandboxtest's fork bomb and
// memory hog cases check that.
func TestCgroupBornInside(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	rt.detect()
	if !rt.cgl.available {
		t.Skip("no usable cgroup: " + rt.cgl.reason)
	}
	spec := sandbox.Spec{Argv: []string{"cat", "/proc/self/cgroup"}, Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64}}
	paths := func(out string) map[string]string {
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, c := range strings.Split(parts[1], ",") {
				if c == "" {
					c = "unified"
				}
				m[c] = parts[2]
			}
		}
		return m
	}
	want := []string{"memory", "pids"}
	if rt.cgl.v2 != "" {
		want = []string{"unified"}
	}
	if rt.cgl.v2 != "" || rt.cgl.v1Threads {
		// Cloned directly (by vfork and by os/exec), and by stage 1
		// (born inside with its parent).
		for _, mode := range []string{"vfork", "exec", "stage1"} {
			setStage1(rt, mode == "stage1")
			rt.noVfork = mode == "exec"
			got := paths(string(run(t, rt, spec).Stdout))
			for _, c := range want {
				if got[c] != "/" {
					t.Errorf("%s: %s: the init was not born in its cgroup: %q (all: %v)", mode, c, got[c], got)
				}
			}
		}
		rt.noVfork = false
	}
	if rt.cgl.v2 == "" {
		setStage1(rt, true)      // ignored: a move after the start never uses stage 1
		rt.cgl.v1Threads = false // the fallback: migrate after the start
		got := paths(string(run(t, rt, spec).Stdout))
		for _, c := range want {
			if !strings.HasPrefix(got[c], "/fluffy-sandbox-") {
				t.Errorf("%s: joined after the start, want a path below the namespace root, got %q", c, got[c])
			}
		}
	}
	assertNoCgroups(t, rt)
}

// TestRunGated: the command starts only after the gate returns nil; a
// gate error starts nothing and leaves nothing behind.
func TestRunGated(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	// Where the sandbox's user (SandboxUID, for root) can write.
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-gated-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{
		Argv:   []string{"/bin/sh", "-c", "echo ran > " + dir + "/ran"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Mounts: []sandbox.Mount{{Source: dir, Writable: true}},
		Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64},
	}
	boom := errors.New("not recorded")
	_, err = rt.RunGated(context.Background(), spec, func() error {
		time.Sleep(20 * time.Millisecond) // the init is waiting, not running the command
		return boom
	})
	if !errors.Is(err, boom) || !errors.Is(err, sandbox.ErrSetup) {
		t.Fatalf("err %v, want the gate's error as a setup error", err)
	}
	if _, err := os.Stat(dir + "/ran"); !os.IsNotExist(err) {
		t.Fatalf("the command ran although the gate refused: %v", err)
	}
	calls := 0
	res, err := rt.RunGated(context.Background(), spec, func() error {
		calls++
		if _, err := os.Stat(dir + "/ran"); !os.IsNotExist(err) {
			t.Errorf("the command ran before the gate returned: %v", err)
		}
		return nil
	})
	if err != nil || res.ExitCode != 0 || calls != 1 {
		t.Fatalf("res %+v err %v gate calls %d", res, err, calls)
	}
	if _, err := os.Stat(dir + "/ran"); err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	assertNoCgroups(t, rt)
}

// TestSweepStale: the cgroups a killed fluffy left (its pid gone) are
// removed; those of a live process, populated ones and other names stay.
func TestSweepStale(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	rt.detect()
	if !rt.cgl.available {
		t.Skip("no usable cgroup: " + rt.cgl.reason)
	}
	// A pid that no process has now: a child that has been reaped.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	parents := []string{rt.cgl.v2}
	if rt.cgl.v2 == "" {
		parents = []string{rt.cgl.v1Memory, rt.cgl.v1Pids}
	}
	// A process of ours that stays inside its (stale-named) cgroup.
	busy := exec.Command("sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{ // name: removed by the sweep
		fmt.Sprintf("fluffy-sandbox-%d-1", dead.Process.Pid): true,
		fmt.Sprintf("fluffy-sandbox-%d-2", dead.Process.Pid): false, // holds busy
		fmt.Sprintf("fluffy-sandbox-%d-7", os.Getpid()):      false, // a live fluffy's
		fmt.Sprintf("fluffy-sandbox-%d-x", dead.Process.Pid): false, // not ours
		fmt.Sprintf("someone-else-%d-1", dead.Process.Pid):   false,
	}
	t.Cleanup(func() {
		// The process first: a cgroup that holds one cannot go.
		_ = busy.Process.Kill()
		_ = busy.Wait()
		for _, p := range parents {
			for n := range names {
				_ = os.Remove(filepath.Join(p, n))
			}
		}
	})
	for _, p := range parents {
		for n := range names {
			if err := os.Mkdir(filepath.Join(p, n), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		procs := "cgroup.procs"
		if rt.cgl.v2 == "" {
			procs = "tasks"
		}
		if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("fluffy-sandbox-%d-2", dead.Process.Pid), procs), []byte(strconv.Itoa(busy.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := rt.SweepStale()
	if err != nil {
		t.Fatal(err)
	}
	// Others may be removed too: what killed fluffy processes left on
	// this machine before the test.
	if n < len(parents) {
		t.Errorf("SweepStale removed %d cgroups, want at least %d", n, len(parents))
	}
	for _, p := range parents {
		for name, gone := range names {
			_, err := os.Stat(filepath.Join(p, name))
			if gone && err == nil {
				t.Errorf("%s: still there", filepath.Join(p, name))
			}
			if !gone && err != nil {
				t.Errorf("%s: removed: %v", filepath.Join(p, name), err)
			}
		}
	}
}

// TestKeyedValues reads a cgroup v1 memory.oom_control, of a kernel with
// and without the oom_kill count, in one read.
func TestKeyedValues(t *testing.T) {
	cases := []struct {
		content string
		want    [2]int
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", [2]int{3, 0}},
		{"oom_kill_disable 0\nunder_oom 1\n", [2]int{0, 1}},
		{"", [2]int{0, 0}},
		{"oom_kill x\nbroken\n", [2]int{0, 0}},
	}
	for _, c := range cases {
		f := filepath.Join(t.TempDir(), "memory.oom_control")
		if err := os.WriteFile(f, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got := keyedValues(f, "oom_kill", "under_oom")
		if got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("%q: got %v, want %v", c.content, got, c.want)
		}
	}
	if got := keyedValues("/nonexistent/memory.oom_control", "oom_kill"); got[0] != 0 {
		t.Errorf("a missing file: %v", got)
	}
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
