package kernel_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

// sleepMark makes the orphan test's sandboxed command findable in /proc.
const sleepMark = "4242.5"

// sandboxChild plays a kernel running a session's sandboxed command: a
// change set under the data directory, the native sandbox with a memory
// and pids limit (a cgroup where the host allows one), a command that
// says it started and sleeps. It prints "READY" once the command runs.
func sandboxChild(home, ws string) int {
	ctx := context.Background()
	d, err := datadir.New(home)
	if err == nil {
		err = d.Ensure()
	}
	var cs *changeset.ChangeSet
	if err == nil {
		cs, err = changeset.Begin(ctx, ws, d.Path(datadir.Changesets, "sorphan"))
	}
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	rt, _ := native.New(native.Options{Self: os.Args[0], AllowDegraded: true})
	go func() {
		for range 600 {
			if _, err := os.Stat(filepath.Join(cs.UpperDir(), "started")); err == nil {
				fmt.Println("READY")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	_, err = rt.Run(ctx, sandbox.Spec{Argv: []string{"/bin/sh", "-c", "echo up > started; exec sleep " + sleepMark},
		Env: []string{"PATH=/usr/bin:/bin"}, Workspace: ws, ChangeSet: cs.UpperDir(),
		Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64, Wall: time.Minute}})
	fmt.Println("ERR run returned", err)
	return 1
}

// TestOrphansAfterKill9 kills a kernel process while a sandboxed command
// runs, then starts a kernel on the same data directory: nothing of the
// dead kernel's sandbox is left — no process, no overlay work directory,
// no cgroup.
func TestOrphansAfterKill9(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	home, ws := t.TempDir(), newWorkspace(t)
	cmd, line := startChild(t, "KERNEL_TEST_SANDBOX_CHILD="+home, "KERNEL_TEST_CHILD_WS="+ws)
	select {
	case l := <-line:
		if l != "READY" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if strings.Contains(l, "sandbox") {
				t.Skipf("no native sandbox here: %s", l)
			}
			t.Fatalf("child said %q", l)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child's sandbox never started")
	}
	pid := cmd.Process.Pid
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	d, _ := datadir.New(home)
	works, _ := filepath.Glob(d.Path(datadir.Changesets, "*", ".fluffy-work-*"))
	if len(works) == 0 {
		t.Fatal("the dead kernel left no work directory: the test cannot see the sweep work")
	}
	cgroups := cgroupsOf(pid)
	t.Logf("left by the dead kernel: %v %v", works, cgroups)

	e := openEnv(t, home, ws)
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	defer k.Stop(context.Background(), "test")

	for _, w := range works {
		if _, err := os.Stat(w); !os.IsNotExist(err) {
			t.Errorf("work directory %s is still there (%v)", w, err)
		}
	}
	if left := cgroupsOf(pid); len(left) > 0 {
		t.Errorf("cgroups of the dead kernel are still there: %v", left)
	}
	if p := findProcess(sleepMark); p != 0 {
		_ = syscall.Kill(p, syscall.SIGKILL)
		t.Errorf("the dead kernel's sandboxed command still runs (pid %d)", p)
	}
	// The change set itself is the session's: kept.
	if _, err := os.Stat(d.Path(datadir.Changesets, "sorphan", "upper", "started")); err != nil {
		t.Errorf("the change set was touched: %v", err)
	}
}

// TestSweepSparesTheLiving: cgroups named after a live process, work
// directories newer than the start, and everything when another kernel
// holds the data directory are left alone.
func TestSweepSparesTheLiving(t *testing.T) {
	d, _ := datadir.New(t.TempDir())
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	cg := t.TempDir()
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(p string) string {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	liveCG := mk(filepath.Join(cg, "fluffy-sandbox-"+strconv.Itoa(live.Process.Pid)+"-1"))
	deadCG := mk(filepath.Join(cg, "fluffy-sandbox-"+strconv.Itoa(dead.Process.Pid)+"-3"))
	other := mk(filepath.Join(cg, "fluffy-sandbox-x-1"))
	oldWork := mk(d.Path(datadir.Changesets, "s1", ".fluffy-work-old"))
	mk(filepath.Join(oldWork, "work"))
	_ = os.Chmod(filepath.Join(oldWork, "work"), 0)
	before := time.Now()
	time.Sleep(10 * time.Millisecond)
	newWork := mk(d.Path(datadir.Changesets, "s1", ".fluffy-work-new"))
	upper := mk(d.Path(datadir.Changesets, "s1", "upper"))
	alive := func(pid int) bool { return pid == live.Process.Pid }

	// Another kernel holds the data directory: its work dirs stay.
	s, err := kernel.SweepOrphans(kernel.SweepOptions{DataDir: d, OwnsDataDir: false, Before: before, CgroupDirs: []string{cg}, Alive: alive})
	if err != nil || len(s.WorkDirs) != 0 || s.Skipped == "" {
		t.Fatalf("not owning: %+v %v", s, err)
	}
	if len(s.Cgroups) != 1 || s.Cgroups[0] != deadCG {
		t.Errorf("cgroups removed: %v, want only %s", s.Cgroups, deadCG)
	}
	s, err = kernel.SweepOrphans(kernel.SweepOptions{DataDir: d, OwnsDataDir: true, Before: before, CgroupDirs: []string{cg}, Alive: alive})
	if err != nil || len(s.WorkDirs) != 1 || s.WorkDirs[0] != oldWork {
		t.Fatalf("owning: %+v %v", s, err)
	}
	for _, p := range []string{liveCG, other, newWork, upper} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed", p)
		}
	}
}

// cgroupsOf lists the cgroups named after pid under any cgroup mount
// (memory and pids of v1, the v2 hierarchy), at any depth this
// process's own cgroups are at.
func cgroupsOf(pid int) []string {
	seen := map[string]bool{}
	var out []string
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, base := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"} {
			m, _ := filepath.Glob(filepath.Join(base, parts[2], fmt.Sprintf("fluffy-sandbox-%d-*", pid)))
			for _, p := range m {
				if !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// findProcess returns the pid of a process whose command line contains
// mark, or 0.
func findProcess(mark string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), mark) {
			return pid
		}
	}
	return 0
}
