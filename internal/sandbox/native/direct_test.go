//go:build amd64

package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"golang.org/x/sys/unix"
)

// TestDirectStart checks what makes a direct start: PID 1 is the reaper
// (no Go init), without any capability; the command is its child, with
// none either, under no_new_privs and seccomp; the Go init (NoDirect) is
// what runs otherwise.
func TestDirectStart(t *testing.T) {
	// PID 1 becomes the reaper just after the command starts: wait for it.
	script := `for i in $(seq 200); do c=$(tr '\0' ' ' < /proc/1/cmdline); case "$c" in fluffy-sandbox-*) break;; esac; sleep 0.01; done; echo "$c"; echo $$; grep -h -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/1/status /proc/self/status | tr -d '\t' | tr '\n' ' '`
	for _, direct := range []bool{true, false} {
		t.Run("direct="+strconv.FormatBool(direct), func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: !direct})
			r := run(t, rt, sandbox.Spec{Argv: []string{"/bin/sh", "-c", script}})
			lines := strings.Split(string(r.Stdout), "\n")
			if r.ExitCode != 0 || len(lines) < 3 {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
			}
			pid1 := strings.TrimSpace(lines[0])
			if direct && (pid1 != "fluffy-sandbox-reaper" || lines[1] != "2") {
				t.Errorf("PID 1 %q, command pid %s: want the reaper and 2", pid1, lines[1])
			}
			if !direct && !strings.HasPrefix(pid1, "fluffy-sandbox-init") {
				t.Errorf("PID 1 %q: want the Go init", pid1)
			}
			// PID 1's, then the command's: the reaper is as restricted as
			// the command (which could write its memory).
			want := "CapEff:0000000000000000 NoNewPrivs:1 Seccomp:2 "
			if direct && lines[2] != want+want {
				t.Errorf("PID 1 and the command: %q, want %q twice", lines[2], want)
			}
			if !strings.HasSuffix(lines[2], want) {
				t.Errorf("the command: %q, want no capability, no_new_privs and a filter", lines[2])
			}
		})
	}
}

// TestDirectParity runs the same specs started directly and through the
// Go init: the results must be the same.
func TestDirectParity(t *testing.T) {
	sh := func(s string) []string { return []string{"/bin/sh", "-c", s} }
	marker := "987.25" // a sleep nobody else runs
	cases := []struct {
		name  string
		spec  sandbox.Spec
		check func(t *testing.T, r sandbox.Result)
	}{
		{"exit code", sandbox.Spec{Argv: sh("exit 7")}, func(t *testing.T, r sandbox.Result) {
			if r.ExitCode != 7 || r.Signal != 0 {
				t.Errorf("exit %d signal %d", r.ExitCode, r.Signal)
			}
		}},
		{"killed itself", sandbox.Spec{Argv: sh("kill -TERM $$; sleep 5")}, func(t *testing.T, r sandbox.Result) {
			if r.Signal != 15 || r.ExitCode != -1 {
				t.Errorf("exit %d signal %d: a command must die of its own SIGTERM (it is not PID 1)", r.ExitCode, r.Signal)
			}
		}},
		{"what it leaves is killed", sandbox.Spec{Argv: sh("sleep " + marker + " & sleep " + marker + " & echo started")}, func(t *testing.T, r sandbox.Result) {
			if string(r.Stdout) != "started\n" {
				t.Errorf("stdout %q", r.Stdout)
			}
			if out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output(); len(out) > 0 {
				t.Errorf("left running after the command: %s", out)
			}
		}},
		{"stdin, stderr", sandbox.Spec{Argv: sh("cat; echo err >&2")}, func(t *testing.T, r sandbox.Result) {
			if string(r.Stdout) != "in\n" || string(r.Stderr) != "err\n" {
				t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
			}
		}},
		{"tmp full", sandbox.Spec{Argv: sh("dd if=/dev/zero of=/tmp/f bs=64k count=100 2>/dev/null; true"), TmpSize: 1 << 20}, func(t *testing.T, r sandbox.Result) {
			if !r.HitLimit(sandbox.LimitTmp) {
				t.Errorf("hit %v, want tmp", r.Hit)
			}
		}},
		{"rlimits", sandbox.Spec{Argv: sh("ulimit -n"), Limits: sandbox.Limits{OpenFiles: 77}}, func(t *testing.T, r sandbox.Result) {
			if strings.TrimSpace(string(r.Stdout)) != "77" {
				t.Errorf("ulimit -n: %q", r.Stdout)
			}
		}},
		{"timeout", sandbox.Spec{Argv: sh("trap '' TERM; sleep " + marker), Limits: sandbox.Limits{Wall: 300 * time.Millisecond}}, func(t *testing.T, r sandbox.Result) {
			if r.Killed != sandbox.LimitTime {
				t.Errorf("killed %q", r.Killed)
			}
			if out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output(); len(out) > 0 {
				t.Errorf("left running after the timeout: %s", out)
			}
		}},
		// rustc moves what it writes from a directory of its own into
		// place (rename(2), no copy to fall back on): a writable tree
		// lets a file move between its directories.
		{"rename across directories", sandbox.Spec{Argv: sh(`mkdir -p /tmp/a/b && echo x >/tmp/a/b/f && perl -e 'rename("/tmp/a/b/f", "/tmp/g") or die "rename: $!\n"; print "moved\n"'`)}, func(t *testing.T, r sandbox.Result) {
			if string(r.Stdout) != "moved\n" {
				t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
			}
		}},
		{"hostname, working directory", sandbox.Spec{Argv: sh("hostname; pwd"), Dir: "/tmp"}, func(t *testing.T, r sandbox.Result) {
			if string(r.Stdout) != "sandbox\n/tmp\n" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
	}
	for _, direct := range []bool{true, false} {
		rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: !direct})
		for _, c := range cases {
			t.Run(c.name+"/direct="+strconv.FormatBool(direct), func(t *testing.T) {
				if c.name == "stdin, stderr" {
					c.spec.Stdin = strings.NewReader("in\n")
				}
				c.check(t, run(t, rt, c.spec))
			})
		}
	}
}

// TestDirectErrors: what fails in the direct child is reported as the
// init reports it, naming what failed.
func TestDirectErrors(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	cases := []struct {
		name string
		spec sandbox.Spec
		is   error
		want []string
	}{
		{"command not found", sandbox.Spec{Argv: []string{"no-such-command"}, Env: []string{"PATH=/usr/bin:/nowhere"}}, sandbox.ErrCommandNotFound,
			[]string{"no-such-command: command not found in the sandbox (PATH=/usr/bin:/nowhere)"}},
		{"not executable", sandbox.Spec{Argv: []string{"/etc/passwd"}}, sandbox.ErrInvalidSpec, []string{"execute /etc/passwd", "permission denied"}},
		{"no working directory", sandbox.Spec{Argv: []string{"/bin/true"}, Dir: "/no/such/dir"}, sandbox.ErrInvalidSpec, []string{"working directory /no/such/dir"}},
		{"mount under a read-only one", sandbox.Spec{Argv: []string{"/bin/true"}, Mounts: []sandbox.Mount{{Source: "/etc", Target: "/usr/fluffy-no-such-dir/x"}}}, sandbox.ErrSetup,
			[]string{"mount: mkdir /newroot/usr/fluffy-no-such-dir", "read-only file system"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.spec.Env == nil {
				c.spec.Env = []string{"PATH=/usr/bin:/bin"}
			}
			_, err := rt.Run(context.Background(), c.spec)
			if !errors.Is(err, c.is) {
				t.Fatalf("err %v, want %v", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not say %q", err, w)
				}
			}
		})
	}
	// Nothing of a failed start is left: no process, no cgroup.
	// Only this process's: others on the machine (other test binaries,
	// the suite's unprivileged rerun) run sandboxes of their own.
	if left := ownReapers(); len(left) > 0 {
		t.Errorf("reapers left: %v", left)
	}
	assertNoCgroups(t, rt)
}

// TestDirectDiesWithOwner kills (SIGKILL) a process while its directly
// started sandbox runs a command that outlives nothing: the command, the
// reaper and what the command started are gone with their owner.
func TestDirectDiesWithOwner(t *testing.T) {
	const marker = "987.75"
	if os.Getenv("FLUFFY_DIRECT_OWNER") == "1" {
		rt := newRuntime(t, Options{Init: smallInit(t)})
		_, _ = rt.Run(context.Background(), sandbox.Spec{Argv: []string{"/bin/sh", "-c", "sleep " + marker + " & echo started; sleep " + marker},
			Env: []string{"PATH=/usr/bin:/bin"}, Stdout: os.Stdout})
		return
	}
	self, _ := os.Executable()
	cmd := exec.Command(self, "-test.run=^TestDirectDiesWithOwner$")
	cmd.Env = append(os.Environ(), "FLUFFY_DIRECT_OWNER=1", "FLUFFY_SBXTEST_INIT="+smallInit(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.Contains(string(buf[:n]), "started") {
		t.Fatalf("the owner's sandbox said %q", buf[:n])
	}
	if b, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output(); len(strings.Fields(string(b))) < 2 {
		t.Fatalf("the sandbox's processes: %q, want its shell and sleeps", b)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
		if len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outlived their owner: %s", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FuzzDirectProg builds direct starts' programs from arbitrary specs'
// strings: never a panic; a NUL byte (which would cut a C string short)
// is refused as an invalid spec; every op of a program has a description.
func FuzzDirectProg(f *testing.F) {
	f.Add("/bin/true", "/work", "/data", "/mnt/x", "PATH=/usr/bin", int64(0))
	f.Add("ls", "/w\x00s", "", "", "", int64(1<<20))
	f.Add("a/b", "", "/d", "relative", "PATH=", int64(-1))
	f.Fuzz(func(t *testing.T, argv0, ws, src, target, env string, tmp int64) {
		cfg := nsinit.Config{Argv: []string{argv0}, Env: []string{env}, Dir: ws, TmpSize: tmp, Landlock: 3, LandlockNet: true,
			Seccomp: make([]byte, 16), Rlimits: []nsinit.Rlimit{{Resource: 7, Value: 64}}}
		if ws != "" {
			cfg.Workspace, cfg.Upper, cfg.Work = ws, ws+"-up", ws+"-work"
		}
		if src != "" {
			cfg.Mounts = []nsinit.MountSpec{{Source: src, Target: target, Writable: true}}
		}
		p, err := directProg(&cfg, directOpts{gated: tmp%2 == 0})
		hasNUL := strings.ContainsRune(argv0+ws+src+target+env, 0)
		if hasNUL {
			if !errors.Is(err, sandbox.ErrInvalidSpec) {
				t.Fatalf("a NUL byte: err %v", err)
			}
			return
		}
		if err != nil {
			return // an argument no program can be built for
		}
		if len(p.ops) != len(p.what) || len(p.ops) == 0 {
			t.Fatalf("%d ops, %d descriptions", len(p.ops), len(p.what))
		}
		fork := -1
		for i, o := range p.ops {
			if o.kind == opVfork {
				fork = i
			}
		}
		if fork < 0 || int(p.ops[fork].next) <= fork || int(p.ops[fork].next) >= len(p.ops) {
			t.Fatalf("the vfork op %d continues at %d of %d", fork, p.ops[max(fork, 0)].next, len(p.ops))
		}
		if last := p.ops[len(p.ops)-1]; last.nr != unix.SYS_EXECVEAT {
			t.Fatalf("the program ends with syscall %d, not the reaper's exec", last.nr)
		}
	})
}

// TestDirectGate: the gate of a direct start runs while the sandbox is
// built, and PID 1, fully restricted, waits for it before the command's
// process exists; a refusal or a cancellation meanwhile starts nothing
// and leaves nothing behind; and a gate that stops the world (what a
// garbage collection in the audit write does) completes.
func TestDirectGate(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-direct-gate-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ran := dir + "/ran"
	spec := sandbox.Spec{
		Argv:   []string{"/bin/sh", "-c", "echo ran >> " + ran},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Mounts: []sandbox.Mount{{Source: dir, Writable: true}},
		Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64},
	}
	rt := newRuntime(t, Options{Init: smallInit(t)})
	notRun := func(t *testing.T) {
		t.Helper()
		if _, err := os.Stat(ran); !os.IsNotExist(err) {
			t.Fatalf("the command ran: %v", err)
		}
	}

	t.Run("beside the build", func(t *testing.T) {
		defer os.Remove(ran)
		var seen string
		res, err := rt.RunGated(context.Background(), spec, func() error {
			notRun(t)
			// The sandbox's PID 1, a child of this process, restricted
			// already, and alone: the command's process is not made yet.
			pid := strconv.Itoa(restrictedChild(t))
			kids, _ := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
			seen = "PID 1 restricted, children [" + strings.TrimSpace(string(kids)) + "]"
			notRun(t)
			return nil
		})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("res %+v err %v", res, err)
		}
		if seen != "PID 1 restricted, children []" {
			t.Errorf("during the gate: %q, want the restricted PID 1 without children", seen)
		}
		if b, _ := os.ReadFile(ran); string(b) != "ran\n" {
			t.Errorf("the command wrote %q after the gate", b)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		gateDone := make(chan struct{})
		go func() {
			time.Sleep(30 * time.Millisecond)
			cancel()
		}()
		_, err := rt.RunGated(ctx, spec, func() error {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // the gate outlives the cancellation
			close(gateDone)
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want the cancellation", err)
		}
		select {
		case <-gateDone:
		default:
			t.Error("RunGated returned before its gate did")
		}
		notRun(t)
		assertNoCgroups(t, rt)
	})

	t.Run("stop the world", func(t *testing.T) {
		defer os.Remove(ran)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.GC()
				}
			}
		}()
		for i := 0; i < 20; i++ {
			res, err := rt.RunGated(context.Background(), spec, func() error {
				runtime.GC()
				return nil
			})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("run %d: res %+v err %v", i, res, err)
			}
		}
		if b, _ := os.ReadFile(ran); strings.Count(string(b), "ran\n") != 20 {
			t.Errorf("the commands wrote %q, want 20 lines", b)
		}
	})
	assertNoCgroups(t, rt)
}

// restrictedChild waits for a child of this process that is restricted
// (no_new_privs, seccomp): a directly started sandbox's PID 1 waiting
// for its gate. Called from a gate, not the test's goroutine, it reports
// a failure with t.Error and returns 0 (the caller's reads then fail).
func restrictedChild(t *testing.T) int {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range childPids(t) {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if err == nil && strings.Contains(string(st), "NoNewPrivs:\t1") && strings.Contains(string(st), "Seccomp:\t2") {
				return pid
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("no restricted child (the sandbox's PID 1) appeared")
	return 0
}

// childPids lists this process's children (of all its threads).
func childPids(t *testing.T) []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Error(err)
	}
	var pids []int
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestDirectNetNS: every directly started sandbox has a network namespace
// of its own, never this process's nor a live sandbox's, with only a
// loopback that is down. A root runtime makes them ahead (netns_linux.go):
// those are owned by the initial user namespace, so nothing in the
// sandbox can configure them; without the pool (or unprivileged) the
// clone makes one that the sandbox's user namespace owns.
func TestDirectNetNS(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	initUserNS := nsInode(t, "/proc/self/ns/user")
	for _, pool := range []bool{true, false} {
		t.Run("pool="+strconv.FormatBool(pool), func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoNetNSPool: !pool})
			ahead := pool && os.Getuid() == 0
			for i := 0; i < 4; i++ {
				if ahead && i > 1 {
					waitNetNSReady(t, rt)
				}
				var ns string
				var owner uint64
				res, err := rt.RunGated(context.Background(), sandbox.Spec{
					Argv: []string{"/bin/sh", "-c", "cat /proc/net/dev /proc/net/if_inet6; readlink /proc/self/ns/net"},
					Env:  []string{"PATH=/usr/bin:/bin"},
				}, func() error {
					p := "/proc/" + strconv.Itoa(restrictedChild(t))
					ns, _ = os.Readlink(p + "/ns/net")
					owner = nsOwner(t, p+"/ns/net")
					return nil
				})
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("res %+v err %v", res, err)
				}
				out := strings.Fields(string(res.Stdout))
				if len(out) == 0 || out[len(out)-1] != ns {
					t.Fatalf("the command's namespace %q, PID 1's %q", res.Stdout, ns)
				}
				if ns == self {
					t.Errorf("run %d: the sandbox is in this process's network namespace", i)
				}
				// /proc/net/dev: two header lines and lo; if_inet6 lists ::1
				// only once lo is up.
				if devs := strings.Count(string(res.Stdout), ":") - 1; !strings.Contains(string(res.Stdout), " lo:") || devs != 1 || strings.Contains(string(res.Stdout), "00000000000000000000000000000001") {
					t.Errorf("run %d: want a single loopback, down:\n%s", i, res.Stdout)
				}
				// Made ahead from the third run on (the first's ask starts
				// nothing, the second's starts the making).
				if got := owner == initUserNS; got != (ahead && i > 1) {
					t.Errorf("run %d: owned by the initial user namespace: %v, want %v", i, got, ahead && i > 1)
				}
			}
			// Two sandboxes alive at once: B's gate reads the namespaces of
			// both PID 1s, A's (the reaper of a sleeping command) and its
			// own.
			var sets [][]string
			var wg sync.WaitGroup
			ctxA, cancelA := context.WithCancel(context.Background())
			defer cancelA()
			wg.Go(func() {
				_, _ = rt.Run(ctxA, sandbox.Spec{Argv: []string{"/bin/sleep", "30"}})
			})
			restrictedChild(t)
			_, err := rt.RunGated(context.Background(), sandbox.Spec{Argv: []string{"/bin/true"}}, func() error {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					var nss []string
					for _, pid := range childPids(t) {
						p := "/proc/" + strconv.Itoa(pid)
						if st, err := os.ReadFile(p + "/status"); err == nil && strings.Contains(string(st), "Seccomp:\t2") {
							if l, err := os.Readlink(p + "/ns/net"); err == nil {
								nss = append(nss, l)
							}
						}
					}
					if len(nss) == 2 {
						sets = append(sets, nss)
						return nil
					}
					time.Sleep(time.Millisecond)
				}
				return errors.New("the two sandboxes were never alive together")
			})
			if err != nil {
				t.Error(err)
			}
			cancelA()
			wg.Wait()
			for _, nss := range sets {
				if nss[0] == nss[1] || nss[0] == self || nss[1] == self {
					t.Errorf("two live sandboxes' network namespaces: %v (this process's %s)", nss, self)
				}
			}
		})
	}
}

// waitNetNSReady waits until rt has a network namespace made ahead.
func waitNetNSReady(t *testing.T, rt *Runtime) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rt.netns.mu.Lock()
		ready := rt.netns.ready
		rt.netns.mu.Unlock()
		if ready {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no network namespace was made ahead")
}

// nsInode is the inode of a namespace file.
func nsInode(t *testing.T, path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// nsOwner is the inode of the user namespace that owns the namespace at
// path (NS_GET_USERNS).
// Called from a gate: failures are t.Error, and 0.
func nsOwner(t *testing.T, path string) uint64 {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer unix.Close(fd)
	ufd, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		t.Errorf("NS_GET_USERNS %s: %v", path, err)
		return 0
	}
	defer unix.Close(ufd)
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		t.Error(err)
		return 0
	}
	return st.Ino
}

// TestDirectPID1BeforeReaper: between the command's start and its own
// exec of the reaper, PID 1 still shares fluffy's memory (the clone's
// CLONE_VM). The command runs by then, as the same user: it must not
// read or write that memory through /proc/1 (fluffy's environment, its
// heap). PID 1 is made to linger in that state here. With landlock the
// command's nested domain keeps it out; without (degraded), PID 1 makes
// the memory undumpable.
func TestDirectPID1BeforeReaper(t *testing.T) {
	for _, landlock := range []bool{true, false} {
		t.Run("landlock="+strconv.FormatBool(landlock), func(t *testing.T) {
			opts := Options{Init: smallInit(t)}
			if !landlock {
				opts.Facilities, opts.AllowDegraded = noLandlock, true
			}
			rt := newRuntime(t, opts)
			rt.pid1Pause = 300 * time.Millisecond
			// The writable mapping's address comes from fluffy's own maps
			// (the same memory); the byte written back is the one read.
			self, err := os.ReadFile("/proc/self/maps")
			if err != nil {
				t.Fatal(err)
			}
			addr := ""
			for _, l := range strings.Split(string(self), "\n") {
				if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "rw") {
					addr = strings.Split(f[0], "-")[0]
					break
				}
			}
			script := `for f in environ maps; do if head -c 64 /proc/1/$f >/dev/null 2>&1; then echo "read /proc/1/$f"; fi; done
a=$((0x` + addr + `))
if dd if=/proc/1/mem bs=1 skip=$a count=1 of=/tmp/b 2>/dev/null && [ -s /tmp/b ]; then echo "read /proc/1/mem"; fi
if [ -s /tmp/b ] && dd if=/tmp/b of=/proc/1/mem bs=1 seek=$a conv=notrunc 2>/dev/null; then echo "wrote /proc/1/mem"; fi
tr '\0' ' ' < /proc/1/cmdline; echo`
			res := run(t, rt, sandbox.Spec{Argv: []string{"/bin/sh", "-c", script}})
			out := string(res.Stdout)
			if res.ExitCode != 0 || !strings.Contains(out, "sandbox serve") && !strings.Contains(out, ".test") {
				t.Fatalf("exit %d, stdout %q, stderr %q: want the command to run while PID 1 is not the reaper yet", res.ExitCode, out, res.Stderr)
			}
			if strings.Contains(out, "read ") || strings.Contains(out, "wrote ") {
				t.Errorf("the command reached the memory PID 1 shares with fluffy:\n%s", out)
			}
			if !landlock && !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "landlock") }) {
				t.Errorf("warnings %q: want the run degraded (no landlock)", res.Warnings)
			}
		})
	}
}

// TestProgMarks: a traced direct start's op times become stage marks in
// the order the ops ended (the command's process runs before PID 1
// resumes), runs of one stage as one mark, descriptors closed on the way
// folded into the next stage, ops that never ran (a successful exec)
// left out.
func TestProgMarks(t *testing.T) {
	p := &childProg{}
	add := func(stage, what string) { p.add(stage, what, childOp{}) }
	add("mount", "make / private")      // 0: also the clone
	add("mount", "scratch tmpfs")       // 1
	add("start", "close 9")             // 2
	add("mount", "bind /usr")           // 3
	add("seccomp", "seccomp filter")    // 4
	add("start", "vfork the command")   // 5: never timed
	add("rlimits", "resource 7")        // 6: the command's process
	add("command", "execute /bin/true") // 7: never returns
	add("start", "hand the command's pid to the reaper")
	add("start", "close 0")
	p.times = []int64{10, 20, 25, 30, 40, 0, 50, 0, 60, 70}
	var got []string
	for _, m := range p.marks() {
		got = append(got, m.Stage+"@"+strconv.FormatInt(m.At, 10))
	}
	want := []string{"clone, namespaces, id maps@10", "mount@30", "seccomp@40", "command's process: rlimits@50", "command started@60"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("marks %v, want %v", got, want)
	}
}

// TestCloseKeepsOthersDescriptors: closing a runtime that never made a
// network namespace ahead closes nothing of anyone else's (its pool's
// zero value once closed descriptor 0, which by then was another
// sandbox's pidfd: killing that sandbox failed and Close hung).
func TestCloseKeepsOthersDescriptors(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	var before [3]bool
	for fd := range before {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		before[fd] = err == nil
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	for fd, was := range before {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); was && err != nil {
			t.Errorf("descriptor %d closed by Close: %v", fd, err)
		}
	}
}

// TestConcurrentStarts: starts of several goroutines at once all succeed.
// A root runtime's start changes its thread's effective ids for the
// clone, which resets the process's dumpable flag (one for the whole
// process): a start whose child opened its /proc/self/uid_map while
// another thread's change had cleared it failed with EACCES.
func TestConcurrentStarts(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run("direct="+strconv.FormatBool(direct), func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: !direct})
			const workers, runs = 4, 25
			var wg sync.WaitGroup
			errs := make(chan error, workers*runs)
			for w := 0; w < workers; w++ {
				wg.Go(func() {
					for i := 0; i < runs; i++ {
						res, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"/bin/true"}})
						if err == nil && res.ExitCode != 0 {
							err = errors.New("exit code " + strconv.Itoa(res.ExitCode))
						}
						if err != nil {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				if n++; n <= 3 {
					t.Error(err)
				}
			}
			if n > 0 {
				t.Errorf("%d of %d concurrent runs failed", n, workers*runs)
			}
		})
	}
}

// TestStartsBesideAGate: while one sandbox waits for its gate (built,
// restricted, before its command), others start and finish: a start no
// longer holds Go's ForkLock past its child's id maps (forkHandoff), and
// the waiting PID 1 holds none of this process's other descriptors (it
// would keep the other start's pipes open until its own exec). So a
// gate that waits for another run does not deadlock.
func TestStartsBesideAGate(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	// A descriptor of this process's, close-on-exec as all of Go's, at a
	// number above every one the child is given.
	f, err := os.Open(smallInit(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const high = 200
	if err := unix.Dup3(int(f.Fd()), high, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(high)
	other := make(chan error, 1)
	res, err := rt.RunGated(context.Background(), sandbox.Spec{Argv: []string{"/bin/true"}}, func() error {
		pid1 := "/proc/" + strconv.Itoa(restrictedChild(t)) + "/fd"
		fds, err := os.ReadDir(pid1)
		if err != nil {
			return err
		}
		for _, fd := range fds {
			if l, _ := os.Readlink(pid1 + "/" + fd.Name()); l == f.Name() {
				return fmt.Errorf("PID 1 holds this process's descriptor of %s (its %s)", l, fd.Name())
			}
		}
		go func() {
			res, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"/bin/sh", "-c", "echo out; exit 3"}})
			if err == nil && (res.ExitCode != 3 || string(res.Stdout) != "out\n") {
				err = fmt.Errorf("exit code %d, stdout %q", res.ExitCode, res.Stdout)
			}
			other <- err
		}()
		select {
		case err := <-other:
			return err
		case <-time.After(20 * time.Second):
			return errors.New("no other sandbox could run while this one waited for its gate")
		}
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("res %+v err %v", res, err)
	}
}

// ownReapers returns the pids of this process's descendants whose command
// line names the reaper.
func ownReapers() []int {
	self := os.Getpid()
	parent := func(pid int) int {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			return 0
		}
		ppid, _ := strconv.Atoi(f[1])
		return ppid
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.Contains(string(cmd), "fluffy-sandbox-reaper") {
			continue
		}
		for p := parent(pid); p > 1; p = parent(p) {
			if p == self {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
