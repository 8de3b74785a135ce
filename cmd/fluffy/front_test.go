package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// buildInstall builds fluffy the way the Makefile installs it: the front
// build as fluffy, the full build as fluffy-core and the sandbox init,
// side by side in a fresh directory.
func buildInstall(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries with")
	}
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"fluffy", ".", "fluffy_front"},
		{"fluffy-core", ".", ""},
		{"fluffy-sandbox-init", "../fluffy-sandbox-init", ""},
	} {
		cmd := exec.Command(goBin, "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.out, err, out)
		}
	}
	return dir
}

// frontInstall holds the host lock of the sandbox suites for the test,
// builds the installed binaries and gives them an environment of their own
// (home, data, configuration and runtime directories under work); the
// sandbox servers they start are killed when the test ends.
func frontInstall(t *testing.T) (bin, work, runDir string, env []string) {
	t.Helper()
	release, err := sandboxtest.AcquireHostLock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	bin = buildInstall(t)
	work = t.TempDir()
	runDir = filepath.Join(work, "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "FLUFFY_HOME=" + filepath.Join(work, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(work, "config"), "XDG_RUNTIME_DIR=" + runDir}
	t.Cleanup(func() {
		m, _ := filepath.Glob(filepath.Join(runDir, "fluffy", "*.sock"))
		for _, sock := range m {
			for _, pid := range serverPids(t, sock) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return bin, work, runDir, env
}

// serverPids lists the sandbox servers listening on sock (their command
// line names it).
func serverPids(t *testing.T, sock string) []int {
	t.Helper()
	ownPidNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 3 && args[1] == "sandbox" && args[2] == "serve" && slices.Contains(args, sock) {
			// A sandbox's PID 1 (built ahead, or starting) shares the
			// server's memory, and so its command line, until its command
			// starts; it lives in a PID namespace of its own, and whatever
			// its parent (the server, an init between them, or init after
			// a reparenting) it is not a server.
			if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || ns != ownPidNS {
				continue
			}
			pids = append(pids, pid)
		}
	}
	// A child of the server in the same namespace (a vfork child before
	// its exec) is not another server either.
	all := slices.Clone(pids)
	return slices.DeleteFunc(pids, func(pid int) bool {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid, _ := strconv.Atoi(strings.TrimSpace(v))
				return slices.Contains(all, ppid)
			}
		}
		return false
	})
}

// settledServers is serverPids once it equals want, or after 2 s: a
// process the server is starting shares its command line for a moment
// (a vfork child before its exec); a second server would stay.
func settledServers(t *testing.T, sock string, want []int) []int {
	t.Helper()
	got := serverPids(t, sock)
	for i := 0; i < 40 && !slices.Equal(got, want); i++ {
		time.Sleep(50 * time.Millisecond)
		got = serverPids(t, sock)
	}
	return got
}

// socketOf is the one socket the installed fluffy's server listens on
// under runDir.
func socketOf(t *testing.T, runDir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(runDir, "fluffy", "*.sock"))
	if len(m) != 1 {
		t.Fatalf("sockets under %s: %q, want one", runDir, m)
	}
	return m[0]
}

// The installed front binary forwards 'sandbox run' to the sandbox
// server, which it starts from fluffy-core on first use, and hands
// everything else over to fluffy-core (same arguments, its exit status),
// saying what to do when fluffy-core is missing.
func TestFrontBinary(t *testing.T) {
	bin, work, runDir, env := frontInstall(t)
	ws := filepath.Join(work, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	env = append(env, "FAKE_API_KEY=sk-front-test-secret")
	fluffyIn := func(dir, stdin string, extraEnv []string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "fluffy"), args...)
		cmd.Dir, cmd.Env = dir, append(append([]string(nil), env...), extraEnv...)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("fluffy %q: %v", args, err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	fluffy := func(args ...string) (string, string, int) {
		t.Helper()
		return fluffyIn(ws, "", nil, args...)
	}
	core := filepath.Join(bin, "fluffy-core")
	aside := filepath.Join(work, "fluffy-core.aside")

	// Without fluffy-core only 'version' works; the rest says what is
	// missing and how to fix it.
	if err := os.Rename(core, aside); err != nil {
		t.Fatal(err)
	}
	if out, _, code := fluffy("version"); code != 0 || !strings.HasPrefix(out, "fluffy ") {
		t.Errorf("front version: exit %d, %q", code, out)
	}
	for _, args := range [][]string{
		{"audit", "verify"},
		{"sandbox", "run", "--", "/bin/true"},
	} {
		_, errOut, code := fluffy(args...)
		if code != 1 || !strings.Contains(errOut, "needs fluffy-core") || !strings.Contains(errOut, "make install") {
			t.Errorf("fluffy %q without fluffy-core: exit %d, stderr %q", args, code, errOut)
		}
	}
	if err := os.Rename(aside, core); err != nil {
		t.Fatal(err)
	}

	// sandbox run goes to the server, started on demand: exit status,
	// output, the write in the change set (a path relative to the
	// caller's directory, not the server's), the workspace untouched.
	out, errOut, code := fluffy("sandbox", "run", "--changeset", "../cs", "--", "/bin/sh", "-c", "echo hi > new.txt; echo ran; echo oops >&2; exit 3")
	if code != 3 || out != "ran\n" || errOut != "oops\n" {
		t.Fatalf("sandbox run through the server: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(work, "cs", "new.txt")); err != nil {
		t.Errorf("the write did not land in the change set: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Error("the sandboxed write reached the workspace")
	}
	sock := socketOf(t, runDir)
	pids := serverPids(t, sock)
	if len(pids) != 1 {
		t.Fatalf("servers on %s: %v, want one", sock, pids)
	}
	// The server keeps the audit log open between runs (30 s), and lets
	// it go when another fluffy process asks for it; the next run opens
	// it again. Each appends where the other left off.
	if _, errOut, code := fluffy("audit", "append", "--payload", `{"note":"between runs"}`); code != 0 {
		t.Fatalf("audit append while the server holds the log: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := fluffy("sandbox", "run", "--", "/bin/true"); code != 0 {
		t.Fatalf("sandbox run after the audit append: exit %d, stderr %q", code, errOut)
	}
	if out, errOut, code := fluffy("audit", "verify"); code != 0 || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The server did not inherit the caller's secrets.
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[0]), "environ")); err != nil {
		t.Fatal(err)
	} else if bytes.Contains(b, []byte("sk-front-test-secret")) {
		t.Error("the sandbox server's environment holds the first caller's FAKE_API_KEY")
	}
	// Standard input reaches the command; the same server serves again.
	if out, errOut, code := fluffyIn(ws, "line one\nline two\n", nil, "sandbox", "run", "--no-workspace", "--", "/bin/cat"); code != 0 || out != "line one\nline two\n" {
		t.Errorf("stdin through the server: exit %d, %q %q", code, out, errOut)
	}
	if again := settledServers(t, sock, pids); !slices.Equal(again, pids) {
		t.Errorf("servers after a second run: %v, want %v", again, pids)
	}
	// Callers at once: the server runs their sandboxes side by side (a
	// root server's starts failed with EACCES when they met), each its own
	// output and status.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 3 {
				want := fmt.Sprintf("%d.%d", i, j)
				out, errOut, code := fluffyIn(ws, "", nil, "sandbox", "run", "--", "/bin/sh", "-c", "echo "+want+"; exit "+strconv.Itoa(i))
				if code != i || out != want+"\n" {
					t.Errorf("concurrent sandbox run %s: exit %d, stdout %q, stderr %q", want, code, out, errOut)
				}
			}
		})
	}
	wg.Wait()
	if again := settledServers(t, sock, pids); !slices.Equal(again, pids) {
		t.Errorf("servers after concurrent runs: %v, want %v", again, pids)
	}
	// The caller's environment, not the server's: --env KEY takes it.
	if out, _, code := fluffy("sandbox", "run", "--no-workspace", "--env", "FAKE_API_KEY", "--", "/bin/sh", "-c", "echo $FAKE_API_KEY"); code != 0 || out != "sk-front-test-secret\n" {
		t.Errorf("--env through the server: exit %d, %q", code, out)
	}

	// Handed over to fluffy-core: arguments and exit status intact; the
	// server's runs are in the log fluffy-core reads.
	out, errOut, code = fluffy("--debug", "audit", "verify")
	if code != 0 || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify through fluffy-core: exit %d, %q %q", code, out, errOut)
	}
	out, _, code = fluffy("audit", "log", "--kind", "exec.end", "--json")
	if code != 0 || !strings.Contains(out, `"exit_code":3`) {
		t.Errorf("the server's exec.end is not in the log: exit %d, %q", code, out)
	}
	if _, errOut, code := fluffy("audit", "verify", "--no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("a usage error through fluffy-core: exit %d, %q", code, errOut)
	}
	// The server runs the other runtimes too.
	if out, errOut, code := fluffy("sandbox", "run", "--runtime", "auto", "--no-workspace", "--", "/bin/sh", "-c", "echo auto; exit 4"); code != 4 || out != "auto\n" {
		t.Errorf("sandbox run --runtime auto through the server: exit %d, %q %q", code, out, errOut)
	}
	// Turned off: fluffy-core runs the command in its own process.
	if out, errOut, code := fluffyIn(ws, "", []string{"FLUFFY_SANDBOX_SERVER=off"}, "sandbox", "run", "--no-workspace", "--", "/bin/sh", "-c", "echo off; exit 5"); code != 5 || out != "off\n" {
		t.Errorf("sandbox run with the server off: exit %d, %q %q", code, out, errOut)
	}
	// 'sandbox server' shows and stops it; the next command starts another.
	if out, errOut, code := fluffy("sandbox", "server", "status"); code != 0 || !strings.Contains(out, "running: pid "+strconv.Itoa(pids[0])) || !strings.Contains(out, sock) {
		t.Errorf("sandbox server status: exit %d, %q %q (want pid %d, socket %s)", code, out, errOut, pids[0], sock)
	}
	if out, errOut, code := fluffy("sandbox", "server", "stop"); code != 0 || out != "stopped (pid "+strconv.Itoa(pids[0])+")\n" {
		t.Errorf("sandbox server stop: exit %d, %q %q", code, out, errOut)
	}
	if left := serverPids(t, sock); len(left) != 0 {
		t.Errorf("servers after stop: %v", left)
	}
	if out, _, code := fluffy("sandbox", "server", "status"); code != 0 || !strings.HasPrefix(out, "not running") {
		t.Errorf("sandbox server status after stop: exit %d, %q", code, out)
	}
	if out, errOut, code := fluffy("sandbox", "run", "--no-workspace", "--", "/bin/sh", "-c", "echo again"); code != 0 || out != "again\n" {
		t.Errorf("sandbox run after stop: exit %d, %q %q", code, out, errOut)
	}
	pids = serverPids(t, sock)
	if len(pids) != 1 {
		t.Fatalf("servers after a restart: %v, want one", pids)
	}
	// A server killed outright is replaced by the next command.
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// (--debug: the client says why, should it run the command itself.)
	out, errOut, code = fluffy("--debug", "sandbox", "run", "--no-workspace", "--", "/bin/sh", "-c", "echo back")
	if code != 0 || out != "back\n" {
		t.Errorf("sandbox run after the server was killed: exit %d, %q %q", code, out, errOut)
	}
	if again := serverPids(t, sock); len(again) != 1 || again[0] == pids[0] {
		t.Errorf("servers after kill -9: %v (the killed one was %v); stderr %q", again, pids, errOut)
	}
	if os.Geteuid() == 0 {
		auditDiskFull(t, work, func(home string, args ...string) (string, string, int) {
			return fluffyIn(ws, "", []string{"FLUFFY_HOME=" + home}, args...)
		})
	}
	// fluffy-core is the front itself (a broken install): no exec loop.
	if err := os.Remove(core); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(bin, "fluffy"), core); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := fluffy("audit", "verify"); code != 1 || !strings.Contains(errOut, "same front binary") {
		t.Errorf("a front installed as fluffy-core: exit %d, %q", code, errOut)
	}
}

// auditDiskFull fills the file system of the audit log under the sandbox
// server (a small tmpfs): a run is then refused, says why, and does not
// run; once there is room again, the next run works, and the log holds
// the refused run's exec.start followed by an exec.end saying it did not
// run (never a start without its outcome), and verifies.
func auditDiskFull(t *testing.T, work string, fluffy func(home string, args ...string) (string, string, int)) {
	t.Helper()
	mnt := filepath.Join(work, "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	home, cs := filepath.Join(mnt, "data"), filepath.Join(work, "cs-full")
	if out, errOut, code := fluffy(home, "sandbox", "run", "--", "/bin/echo", "first"); code != 0 || out != "first\n" {
		t.Fatalf("first run: exit %d, %q %q", code, out, errOut)
	}
	fill, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := fill.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fill.Close()
	out, errOut, code := fluffy(home, "sandbox", "run", "--changeset", cs, "--", "/bin/sh", "-c", "echo ran > ran.txt; echo ran")
	if code != 125 || out != "" || !strings.Contains(errOut, "audit.db") || !strings.Contains(errOut, "full") {
		t.Errorf("run with the audit log's disk full: exit %d, stdout %q, stderr %q; want 125 and a message naming the log and the full disk", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(cs, "ran.txt")); err == nil {
		t.Error("the command ran although its exec.start could not be recorded")
	}
	if err := os.Remove(fill.Name()); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := fluffy(home, "sandbox", "run", "--", "/bin/echo", "third"); code != 0 || out != "third\n" {
		t.Fatalf("run after the disk has room again: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = fluffy(home, "audit", "log")
	if code != 0 {
		t.Fatalf("audit log: exit %d, %q", code, errOut)
	}
	var lines []string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "\texec.") {
			lines = append(lines, l)
		}
	}
	want := []struct{ kind, has string }{
		{"exec.start", `"first"`}, {"exec.end", `"exit_code":0`},
		{"exec.start", "ran.txt"}, {"exec.end", "not run: the audit log could not make exec.start durable"},
		{"exec.start", `"third"`}, {"exec.end", `"exit_code":0`},
	}
	if len(lines) != len(want) {
		t.Fatalf("exec entries:\n%s\nwant %d", strings.Join(lines, ""), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "\t"+w.kind+"\t") || !strings.Contains(lines[i], w.has) {
			t.Errorf("exec entry %d: %q, want %s with %s", i, lines[i], w.kind, w.has)
		}
	}
	if out, errOut, code := fluffy(home, "audit", "verify"); code != 0 || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify after the full disk: exit %d, %q %q", code, out, errOut)
	}
}

// filterEnv names the seccomp filters (comma-separated: "allow",
// "deny-getpriority") the test binary stacks, in its init, before it
// executes its arguments: a client that confined itself. "landlock-fifo"
// enters a landlock domain that refuses making FIFOs instead.
const filterEnv = "FLUFFY_TEST_STACK_FILTERS"

func init() {
	v, ok := os.LookupEnv(filterEnv)
	if !ok {
		return
	}
	os.Unsetenv(filterEnv)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		os.Exit(1)
	}
	for _, name := range strings.Split(v, ",") {
		var ins []unix.SockFilter
		switch name {
		case "landlock-fifo":
			// init runs on the main thread, which the exec below keeps:
			// the domain is that thread's.
			attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_MAKE_FIFO}
			fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
			if e == 0 {
				_, _, e = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0)
			}
			if e != 0 {
				fmt.Fprintln(os.Stderr, "landlock:", e)
				os.Exit(1)
			}
			continue
		case "allow":
			ins = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
		case "deny-getpriority":
			ins = []unix.SockFilter{
				{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
				{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_GETPRIORITY, Jt: 0, Jf: 1},
				{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
				{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
			}
		default:
			fmt.Fprintln(os.Stderr, "unknown filter", name)
			os.Exit(1)
		}
		prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
			fmt.Fprintln(os.Stderr, "seccomp:", e)
			os.Exit(1)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(1)
}

// TestFrontStackedFilter: a client that stacked a seccomp filter on top
// of the ones a sandbox server was started under is not served by that
// server, whose commands run without the extra filter: its filter still
// applies to its command (it runs under another server, started with
// the client's filters, or in the client's own process).
func TestFrontStackedFilter(t *testing.T) {
	bin, work, _, env := frontInstall(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fluffy := func(filters string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(self, append([]string{filepath.Join(bin, "fluffy")}, args...)...)
		cmd.Dir, cmd.Env = work, append(slices.Clone(env), filterEnv+"="+filters)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("fluffy %q: %v", args, err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	// A server started under one filter (which allows everything).
	if out, errOut, code := fluffy("allow", "sandbox", "run", "--no-workspace", "--", "nice"); code != 0 || out != "0\n" {
		t.Fatalf("nice under one filter: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The same user, the same filter and one more that refuses
	// getpriority: nice must fail inside the sandbox.
	out, errOut, code := fluffy("allow,deny-getpriority", "sandbox", "run", "--no-workspace", "--", "nice")
	if code == 0 || !strings.Contains(errOut, "cannot get niceness") {
		t.Errorf("nice under a stacked filter that refuses getpriority: exit %d, stdout %q, stderr %q; want it refused (the filter shed)", code, out, errOut)
	}
}

// TestFrontLandlocked: a client in a landlock domain (which /proc does
// not show) is not served by a sandbox server outside it, whose
// commands would run without the domain: it cannot open the server's
// /proc entry, the server refuses it, and the command runs in the
// client's own process, under its domain (where the sandbox cannot even
// be built: a domain forbids mounts). As an ordinary user (root's
// CAP_SYS_PTRACE passes landlock's ptrace scoping, and with it the
// proof). Both runs are under no_new_privs and one seccomp filter, so
// that everything /proc shows is the same.
func TestFrontLandlocked(t *testing.T) {
	bin, _, _, _ := frontInstall(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrap, bin, work := asOrdinaryUser(t, bin, self)
	if wrap != nil {
		self = filepath.Join(bin, filepath.Base(self))
	}
	env, ws := userEnv(t, wrap, work)
	fluffy := func(filters string, args ...string) (string, int) {
		t.Helper()
		argv := append(append(append([]string(nil), wrap...), self, filepath.Join(bin, "fluffy")), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = ws, append(slices.Clone(env), filterEnv+"="+filters)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run()
		return out.String(), cmd.ProcessState.ExitCode()
	}
	// The server, started outside any landlock domain.
	if out, code := fluffy("allow", "sandbox", "run", "--", "mkfifo", "p1"); code != 0 {
		t.Fatalf("mkfifo outside a landlock domain: exit %d, %q", code, out)
	}
	out, code := fluffy("allow,landlock-fifo", "sandbox", "run", "--", "mkfifo", "p2")
	if strings.Contains(out, "landlock:") {
		t.Skipf("no landlock here: %s", out)
	}
	// In its own process the command runs under the domain, or not at
	// all: a landlock domain also forbids the mounts a sandbox is built
	// with (the setup fails, 125).
	if code == 0 || !(strings.Contains(out, "Permission denied") || code == 125 && strings.Contains(out, "sandbox setup failed")) {
		t.Errorf("mkfifo in a landlock domain that refuses it: exit %d, %q; want it refused, or no sandbox (not the domain shed)", code, out)
	}
}
