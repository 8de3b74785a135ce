package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// TestMain lets this test binary act as the sandbox init and as the
// suite's probe, the way cmd/fluffy dispatches.
func TestMain(m *testing.M) {
	if IsInit() {
		os.Exit(InitMain())
	}
	if sandboxtest.IsProbe() {
		os.Exit(sandboxtest.ProbeMain())
	}
	if os.Getenv(swapProbeEnv) == "1" {
		os.Exit(swapProbeMain())
	}
	code := m.Run()
	if smallInitDir != "" {
		os.RemoveAll(smallInitDir)
	}
	os.Exit(code)
}

var (
	smallInitOnce sync.Once
	smallInitDir  string
	smallInitPath string
	smallInitErr  error
)

// smallInit returns cmd/fluffy-sandbox-init built for this test run (the
// init production uses; the test binary itself re-executed is the
// fallback, which TestBasics covers).
func smallInit(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FLUFFY_SBXTEST_INIT"); p != "" {
		return p
	}
	smallInitOnce.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			smallInitErr = err
			return
		}
		if smallInitDir, smallInitErr = os.MkdirTemp("", "fluffy-init-"); smallInitErr != nil {
			return
		}
		smallInitPath = filepath.Join(smallInitDir, InitBinaryName)
		cmd := exec.Command(goCmd, "build", "-o", smallInitPath, "github.com/fluffy-agent/fluffy/cmd/fluffy-sandbox-init")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			smallInitErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if smallInitErr != nil {
		t.Skipf("cannot build the sandbox init binary: %v", smallInitErr)
	}
	return smallInitPath
}

func newRuntime(t testing.TB, opts Options) *Runtime {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Self = self
	rt, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rt.detect()
	if !rt.facility("userns").Available {
		t.Skipf("no user namespaces here: %s", rt.facility("userns").Detail)
	}
	return rt
}

// TestSuite runs the adversarial suite as the current user (root in CI;
// TestSuiteUnprivileged reruns it as an ordinary user), with the small
// init binary.
func TestSuite(t *testing.T) {
	// direct: the direct start, no Go init (the default); ahead: the
	// direct start built ahead (PrepareNext) for each case; vfork: this
	// process clones the Go init by vfork; exec: by os/exec (a full
	// fork, the fallback); stage1: the small init binary clones it (for
	// a build without vfork and a big heap).
	for _, mode := range []string{"direct", "ahead", "vfork", "exec", "stage1"} {
		t.Run(mode, func(t *testing.T) {
			if testing.Short() && mode != "direct" {
				t.Skip("-short: the suite takes seconds per start mode and runs on the default one (direct) only; run without -short for every mode")
			}
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: mode != "direct" && mode != "ahead"})
			if mode == "ahead" {
				// Every case on a sandbox built ahead for its spec.
				defer rt.Close()
				sandboxtest.Run(t, sandboxtest.Options{Runtime: aheadRuntime{rt}, MemoryKills: rt.cgl.available})
				if used, discarded := rt.AheadStats(); used == 0 {
					t.Error("no case ran on an ahead start")
				} else {
					t.Logf("%d cases on an ahead start, %d discarded", used, discarded)
				}
				assertNoCgroups(t, rt)
				return
			}
			if rt.InitPath() == rt.opts.Self {
				t.Fatal("the suite runs the test binary as the init, not the small init")
			}
			setStage1(rt, mode == "stage1")
			rt.noVfork = mode == "exec"
			sandboxtest.Run(t, sandboxtest.Options{Runtime: rt, MemoryKills: rt.cgl.available})
			// Nothing left behind: no cgroup of ours.
			assertNoCgroups(t, rt)
		})
	}
}

// setStage1 makes rt always (on) or never (off) start the init through
// stage 1, whatever the size of this process.
func setStage1(rt *Runtime, on bool) {
	rt.stage1Min = math.MaxInt64
	if on {
		rt.stage1Min = 0
	}
}

const unprivUser = "fluffy-sbxtest"

// TestSuiteUnprivileged reruns the suite as an unprivileged user (created
// when missing) through setpriv.
func TestSuiteUnprivileged(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the unprivileged rerun of the suite takes about half a minute; run without -short")
	}
	if os.Getenv("FLUFFY_SBXTEST_UNPRIV") == "1" {
		t.Skip("already the unprivileged run")
	}
	if os.Getuid() != 0 {
		t.Skip("not root: TestSuite already runs unprivileged")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) missing: cannot switch users")
	}
	u, err := user.Lookup(unprivUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", unprivUser).CombinedOutput(); err != nil {
			t.Skipf("cannot create user %s: %v %s", unprivUser, err, out)
		}
		if u, err = user.Lookup(unprivUser); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, _ := os.Executable()
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "native.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ib, err := os.ReadFile(smallInit(t))
	if err != nil {
		t.Fatal(err)
	}
	initBin := filepath.Join(dir, InitBinaryName+".test")
	if err := os.WriteFile(initBin, ib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", "--",
		bin, "-test.run=^TestSuite$|^TestBasics$|^TestEgressProxy$|^TestSecretSwap$|^TestRunGated$|^TestCgroupBornInside$|^TestVforkProcess$|^TestUserNSOwner$|^TestVforkNofile$|^TestDirect|^TestAhead|^TestStartMode", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "FLUFFY_SBXTEST_UNPRIV=1", "TMPDIR=" + dir, "FLUFFY_SBXTEST_INIT=" + initBin}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("suite as %s (uid %s): %v\n%s", unprivUser, u.Uid, err, out)
	}
	if bytes.Contains(out, []byte("SKIP")) {
		t.Logf("the unprivileged run skipped something:\n%s", out)
	}
}

func run(t *testing.T, rt *Runtime, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/bin:/bin"}
	}
	res, err := rt.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("run %v: %v", spec.Argv, err)
	}
	return res
}

// TestBasics runs the test binary itself as the init: the fallback when
// no small init is installed beside fluffy.
func TestBasics(t *testing.T) {
	rt := newRuntime(t, Options{})
	if rt.InitPath() != rt.opts.Self {
		t.Fatalf("init %s, want the test binary", rt.InitPath())
	}
	sh := func(s string) []string { return []string{"/bin/sh", "-c", s} }
	t.Run("exit code", func(t *testing.T) {
		if r := run(t, rt, sandbox.Spec{Argv: sh("exit 7")}); r.ExitCode != 7 || r.Signal != 0 {
			t.Errorf("got exit %d signal %d", r.ExitCode, r.Signal)
		}
	})
	t.Run("signal", func(t *testing.T) {
		if r := run(t, rt, sandbox.Spec{Argv: sh("kill -TERM $$")}); r.Signal != 15 {
			t.Errorf("got exit %d signal %d", r.ExitCode, r.Signal)
		}
	})
	t.Run("oom score", func(t *testing.T) {
		// Every sandbox is the OOM killer's first choice, whichever
		// way it starts: directly, or through the Go init.
		for _, noDirect := range []bool{false, true} {
			rt := rt
			if noDirect {
				rt = newRuntime(t, Options{NoDirect: true})
			}
			r := run(t, rt, sandbox.Spec{Argv: sh("cat /proc/self/oom_score_adj /proc/1/oom_score_adj")})
			if got := strings.Fields(string(r.Stdout)); len(got) != 2 || got[0] != nsinit.OOMScoreAdj || got[1] != nsinit.OOMScoreAdj {
				t.Errorf("NoDirect %v: oom_score_adj of the command and PID 1: %q (stderr %q), want %s", noDirect, r.Stdout, r.Stderr, nsinit.OOMScoreAdj)
			}
		}
	})
	t.Run("stdin and output cap", func(t *testing.T) {
		r := run(t, rt, sandbox.Spec{Argv: []string{"cat"}, Stdin: strings.NewReader("0123456789"), Limits: sandbox.Limits{Output: 4}})
		if string(r.Stdout) != "0123"+sandbox.TruncationMarker || !r.HitLimit(sandbox.LimitOutput) {
			t.Errorf("stdout %q hit %v", r.Stdout, r.Hit)
		}
	})
	t.Run("file size limit", func(t *testing.T) {
		r := run(t, rt, sandbox.Spec{Argv: []string{"dd", "if=/dev/zero", "of=/tmp/x", "bs=1000", "count=100"}, Limits: sandbox.Limits{FileSize: 1000}})
		if r.Killed != sandbox.LimitFileSize {
			t.Errorf("killed %q signal %d", r.Killed, r.Signal)
		}
	})
	t.Run("command not found", func(t *testing.T) {
		_, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"no-such-command"}, Env: []string{"PATH=/usr/bin"}})
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !errors.Is(err, sandbox.ErrCommandNotFound) || !strings.Contains(err.Error(), "no-such-command") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("changes", func(t *testing.T) {
		base, err := os.MkdirTemp("/var/tmp", "fluffy-changes-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		ws, cs := filepath.Join(base, "ws"), filepath.Join(base, "cs")
		os.MkdirAll(filepath.Join(ws, "d"), 0o755)
		os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("a\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "mod.txt"), []byte("a\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "del.txt"), []byte("a\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "d", "x"), []byte("a\n"), 0o644)
		r := run(t, rt, sandbox.Spec{Argv: sh("echo b >> mod.txt && rm del.txt && rm -r d && echo n > new.txt"), Workspace: ws, ChangeSet: cs})
		if r.ExitCode != 0 {
			t.Fatalf("exit %d: %s", r.ExitCode, r.Stderr)
		}
		got, err := sandbox.ReadChanges(ws, cs)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, c := range got {
			s = append(s, string(c.Kind)+" "+c.Path)
		}
		want := "deleted d,deleted d/x,deleted del.txt,modified mod.txt,added new.txt"
		if strings.Join(s, ",") != want {
			t.Errorf("changes:\n got %s\nwant %s", strings.Join(s, ","), want)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "mod.txt")); string(b) != "a\n" {
			t.Errorf("workspace written: %q", b)
		}
		left, _ := filepath.Glob(filepath.Join(base, ".fluffy-work-*"))
		if len(left) > 0 {
			t.Errorf("overlay work directories left behind: %v", left)
		}
	})
}

// noLandlock reports the host's facilities with landlock missing.
func noLandlock() []sandbox.Facility {
	f := quickFacilities(findCgroups())
	for i := range f {
		if f[i].Name == "landlock" {
			f[i] = sandbox.Facility{Name: "landlock", Required: true, Detail: "pretend: ABI 0", Fix: landlockFix}
		}
	}
	return f
}

func TestDegraded(t *testing.T) {
	rt := newRuntime(t, Options{Facilities: noLandlock})
	_, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"/bin/true"}})
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "landlock") || !strings.Contains(err.Error(), "fix:") {
		t.Fatalf("err = %v, want an UnavailableError naming landlock and its fix", err)
	}
	rt = newRuntime(t, Options{Facilities: noLandlock, AllowDegraded: true})
	r := run(t, rt, sandbox.Spec{Argv: []string{"/bin/true"}})
	if r.ExitCode != 0 || len(r.Warnings) == 0 || !strings.Contains(r.Warnings[0], "DEGRADED: running without landlock") {
		t.Errorf("exit %d warnings %q", r.ExitCode, r.Warnings)
	}
}

func TestDetect(t *testing.T) {
	self, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]sandbox.Facility{}
	for _, f := range Detect(ctx, DetectOptions{Self: self, TempDir: "/var/tmp"}) {
		got[f.Name] = f
	}
	for _, name := range []string{"userns", "landlock", "seccomp", "overlay-userns", "cgroup"} {
		f, ok := got[name]
		if !ok {
			t.Errorf("facility %s not reported", name)
			continue
		}
		t.Logf("%-15s available=%v %s", name, f.Available, f.Detail)
		if name != "cgroup" && !f.Available {
			t.Errorf("%s unavailable on the CI host: %s", name, f.Detail)
		}
	}
	if got["landlock"].Version < 1 {
		t.Errorf("landlock ABI %d", got["landlock"].Version)
	}
}

// BenchmarkRunTrue runs /bin/true with the small init binary (what
// fluffy uses when installed); BenchmarkRunTrueSelfInit re-executes the
// (large) test binary instead.
func BenchmarkRunTrue(b *testing.B) {
	benchRunTrue(b, newRuntime(b, Options{Init: smallInit(b)}))
}

// BenchmarkRunTrueGoInit starts the Go init by vfork, as every run did
// before the direct start (BenchmarkRunTrue).
func BenchmarkRunTrueGoInit(b *testing.B) {
	benchRunTrue(b, newRuntime(b, Options{Init: smallInit(b), NoDirect: true}))
}

// BenchmarkRunTrueExec starts the init with os/exec (a full fork of this
// process) instead of vfork; BenchmarkRunTrueStage1 through stage 1;
// BenchmarkRunTrueHeap* run with 64 MB of touched heap, as a long-lived
// agent might have, with the default start (vfork), with os/exec, and
// with os/exec's default for such a heap (stage 1).
func BenchmarkRunTrueExec(b *testing.B) {
	rt := newRuntime(b, Options{Init: smallInit(b)})
	rt.noVfork = true
	benchRunTrue(b, rt)
}

func BenchmarkRunTrueStage1(b *testing.B) {
	rt := newRuntime(b, Options{Init: smallInit(b), NoDirect: true})
	setStage1(rt, true)
	benchRunTrue(b, rt)
}

func BenchmarkRunTrueHeap64MB(b *testing.B) {
	defer ballast(64)()
	benchRunTrue(b, newRuntime(b, Options{Init: smallInit(b)}))
}

func BenchmarkRunTrueHeap64MBExec(b *testing.B) {
	defer ballast(64)()
	rt := newRuntime(b, Options{Init: smallInit(b)})
	rt.noVfork = true
	setStage1(rt, false)
	benchRunTrue(b, rt)
}

func BenchmarkRunTrueHeap64MBExecStage1(b *testing.B) {
	defer ballast(64)()
	rt := newRuntime(b, Options{Init: smallInit(b)})
	rt.noVfork = true
	benchRunTrue(b, rt)
}

var heapBallast [][]byte

// ballast allocates and touches mb MB of heap until the returned function
// is called.
func ballast(mb int) func() {
	for range mb {
		p := make([]byte, 1<<20)
		for i := 0; i < len(p); i += 4096 {
			p[i] = 1
		}
		heapBallast = append(heapBallast, p)
	}
	return func() { heapBallast = nil; runtime.GC() }
}

func BenchmarkRunTrueSelfInit(b *testing.B) {
	benchRunTrue(b, newRuntime(b, Options{}))
}

func benchRunTrue(b *testing.B, rt *Runtime) {
	spec := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}}
	if os.Getenv("FLUFFY_BENCH_NOCGROUP") == "1" {
		spec.Limits = sandbox.Limits{}
	}
	benchMedian(b, func() error {
		_, err := rt.Run(context.Background(), spec)
		return err
	})
}

// BenchmarkRunTrueParallel runs /bin/true from four goroutines at once,
// as a daemon's concurrent tool calls do, each run gated by a pause: 1 ms
// (what recording exec.start durably costs) and 10 ms (a slow disk's
// fsync). ns/op is the wall time per run of the whole group: what
// concurrency gains shows as a figure below BenchmarkRunTrue's median,
// bounded by the CPU (cpu-ms/op over the cores).
func BenchmarkRunTrueParallel(b *testing.B) {
	for _, pause := range []time.Duration{time.Millisecond, 10 * time.Millisecond} {
		b.Run("gate="+pause.String(), func(b *testing.B) {
			rt := newRuntime(b, Options{Init: smallInit(b)})
			spec := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}}
			gate := func() error { time.Sleep(pause); return nil }
			cpu0 := cpuTime()
			b.SetParallelism(2) // 2 × GOMAXPROCS goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := rt.RunGated(context.Background(), spec, gate); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkExecBesideSandboxes measures what a plain os/exec start of
// /bin/true takes (median) while two goroutines run gated sandboxes
// without pause, each gate 1 ms: Go's ForkLock, which every fork of the
// process takes, is what they share (forkHandoff).
func BenchmarkExecBesideSandboxes(b *testing.B) {
	rt := newRuntime(b, Options{Init: smallInit(b)})
	spec := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}}
	gate := func() error { time.Sleep(time.Millisecond); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := rt.RunGated(ctx, spec, gate); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	benchMedian(b, func() error { return exec.Command("/bin/true").Run() })
	cancel()
	wg.Wait()
}

// BenchmarkBwrapTrue is the reference: bubblewrap with every namespace
// unshared running /bin/true, as bench/sandbox.sh runs it.
func BenchmarkBwrapTrue(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap (bubblewrap) is not installed")
	}
	args := strings.Fields("--unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true")
	benchMedian(b, func() error { return exec.Command(bwrap, args...).Run() })
}

// BenchmarkNamespacesTrue is a floor, not a sandbox: /bin/true cloned by
// os/exec straight into the seven namespaces a sandbox gets (Go's own
// vfork child, no init, no root, no restrictions, no cgroup). What a
// sandbox costs above it is the init (its Go runtime and its work) and
// the parent's bookkeeping; docs/sandbox.md ("CPU per run") compares.
func BenchmarkNamespacesTrue(b *testing.B) {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP)
	benchMedian(b, func() error {
		c := exec.Command("/bin/true")
		c.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  flags,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Setsid:      true,
		}
		return c.Run()
	})
}

// cpuTime is the user + system time of this process and of its reaped
// children.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// benchMedian runs op b.N times and reports, besides the mean, the median
// and the minimum: on a shared, loaded machine the mean follows the
// neighbours' load more than the code.
func benchMedian(b *testing.B, op func() error) {
	var ds []time.Duration
	cpu0 := cpuTime()
	for b.Loop() {
		t := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	reportMedian(b, ds, cpuTime()-cpu0)
}

// reportMedian reports the CPU time per run, the median and the minimum
// of the runs' durations ds.
func reportMedian(b *testing.B, ds []time.Duration, cpu time.Duration) {
	slices.Sort(ds)
	if len(ds) > 0 {
		// CPU time of this process and every child it reaped (the init,
		// the command; bwrap): less noisy than wall time on a busy host.
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(ds)), "cpu-ms/op")
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
		b.ReportMetric(float64(ds[0].Microseconds())/1000, "min-ms")
	}
}

// TestPrepare: Prepare (concurrently with a run) leaves the host
// detection done once and runs working.
func TestPrepare(t *testing.T) {
	rt, err := New(Options{Self: "/nonexistent", Init: smallInit(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rt.Prepare()
	}()
	rt.Prepare()
	<-done
	if !rt.facility("userns").Available {
		t.Skipf("no user namespaces here: %s", rt.facility("userns").Detail)
	}
	res := run(t, rt, sandbox.Spec{Argv: []string{"/bin/true"}})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
}

// aheadRuntime runs every spec on a sandbox built ahead for it
// (PrepareNext), as a sandbox server's next request would.
type aheadRuntime struct{ *Runtime }

func (a aheadRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	_ = a.PrepareNext(spec, nil) // when it cannot, the run starts on demand
	return a.Runtime.Run(ctx, spec)
}

// A native sandbox has no image to start from: a spec naming one (a
// skill's) is refused, never run on the host's files instead.
func TestImageRefused(t *testing.T) {
	rt := newRuntime(t, Options{})
	_, err := rt.Run(t.Context(), sandbox.Spec{Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Image: "fluffy-skill/weather:0123456789ab"})
	if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "fluffy-skill/weather") {
		t.Fatalf("err = %v", err)
	}
	err = rt.PrepareNext(sandbox.Spec{Argv: []string{"true"}, Image: "fluffy-skill/weather:0123456789ab"}, nil)
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("prepare: err = %v", err)
	}
}
