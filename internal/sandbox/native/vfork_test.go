//go:build amd64 || arm64

package native

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// vforkCmd describes a process in new namespaces the way run does.
func vforkCmd(t *testing.T, path string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	host := os.Getuid()
	hostG := os.Getgid()
	if host == 0 {
		host, hostG = SandboxUID, SandboxUID
	}
	var out bytes.Buffer
	return &exec.Cmd{
		Path:   path,
		Args:   append([]string{path}, args...),
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdout: &out,
		Stderr: &out,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: host, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostG, Size: 1}},
			Setsid:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}, &out
}

// TestVforkProcess starts processes the way the init is started: in new
// namespaces, uid 0 inside, the host id mapped, setgroups denied (allowed
// for root's, whose maps the parent writes), a session of its own, output
// captured; a failed exec is reported and leaves no child.
func TestVforkProcess(t *testing.T) {
	newRuntime(t, Options{}) // skips without user namespaces
	host, setgroups := os.Getuid(), "deny"
	if host == 0 {
		host, setgroups = SandboxUID, "allow"
	}
	cmd, out := vforkCmd(t, "/bin/sh", "-c", `echo "$(id -u) $(id -g) $(cat /proc/self/uid_map) $(cat /proc/self/setgroups) $$ $(grep Groups: /proc/self/status)"; exit 3`)
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	p := &vforkProcess{cmd: cmd}
	if _, err := startOnThread(nil, nil, nil, p.Start, p.Reusable, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	// The child's change of uid (root callers) cleared the flag of the
	// memory it shared with this process, and it was set back.
	if d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); d != dumpable {
		t.Errorf("dumpable %d after the start, was %d", d, dumpable)
	}
	err := p.Wait()
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("wait: %v, want exit status 3", err)
	}
	f := strings.Fields(out.String())
	if len(f) != 8 || f[0] != "0" || f[1] != "0" || f[2] != "0" || f[3] != strconv.Itoa(host) || f[5] != setgroups || f[6] != "1" || f[7] != "Groups:" {
		t.Errorf("inside: %q, want uid 0, gid 0, uid_map 0 %d 1, setgroups %s, pid 1, no supplementary groups", out.String(), host, setgroups)
	}
	if !errors.Is(p.Signal(syscall.SIGKILL), os.ErrProcessDone) {
		t.Error("a signal after Wait must not reach anything")
	}
	// This thread's credentials are the process's again.
	if os.Geteuid() != os.Getuid() || os.Getegid() != os.Getgid() {
		t.Errorf("credentials not restored: euid %d egid %d", os.Geteuid(), os.Getegid())
	}

	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	bad, _ := vforkCmd(t, "/nonexistent/init")
	bad.Stdin = strings.NewReader("in")
	p = &vforkProcess{cmd: bad}
	_, err = startOnThread(nil, nil, nil, p.Start, p.Reusable, make(chan struct{}))
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("start of a missing program: %v, want ENOENT", err)
	}
	if after := fds(); after != before {
		t.Errorf("a failed start leaves descriptors open: %d before, %d after", before, after)
	}
	var ws syscall.WaitStatus
	if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD && pid != 0 {
		t.Errorf("a child was left behind: pid %d err %v", pid, err)
	}
}

// TestVforkStepErrors: a child that fails before its exec says which of
// its steps failed (vforkStep), and leaves nothing behind. An id map that
// maps a host id no one may map (-1) fails its write, for root too (whose
// child's maps the parent writes).
func TestVforkStepErrors(t *testing.T) {
	newRuntime(t, Options{}) // skips without user namespaces
	uidWant, gidWant := "the new process could not write its /proc/self/uid_map: ", "the new process could not write its /proc/self/gid_map: "
	if os.Getuid() == 0 {
		uidWant = "the new process could not have its id maps written by its parent: "
		gidWant = uidWant
	}
	for _, c := range []struct {
		name string
		bad  func(*syscall.SysProcAttr)
		want string
	}{
		{"uid map", func(a *syscall.SysProcAttr) { a.UidMappings[0].HostID = -1 }, uidWant},
		{"gid map", func(a *syscall.SysProcAttr) { a.GidMappings[0].HostID = -1 }, gidWant},
	} {
		cmd, _ := vforkCmd(t, "/bin/true")
		c.bad(cmd.SysProcAttr)
		p := &vforkProcess{cmd: cmd}
		_, err := startOnThread(nil, nil, nil, p.Start, p.Reusable, make(chan struct{}))
		var errno syscall.Errno
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.As(err, &errno) {
			t.Errorf("%s: %v, want %q and the errno", c.name, err, c.want+"...")
		}
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD && pid != 0 {
			t.Errorf("%s: a child was left behind: pid %d err %v", c.name, pid, err)
		}
	}
}

// TestVforkParentGone: a root caller's child that waits for its id maps
// ends when its parent goes away without writing them (here the writer
// closes its end unanswered, as a parent's kill -9 does), reporting
// EPIPE. It used to wait for good on its own inherited copy of the
// parent's end, holding every descriptor it inherited, the audit log's
// lock among them.
func TestVforkParentGone(t *testing.T) {
	newRuntime(t, Options{}) // skips without user namespaces
	if os.Getuid() != 0 {
		t.Skip("only a root caller's child has its maps written by its parent")
	}
	cmd, _ := vforkCmd(t, "/bin/true")
	p := &vforkProcess{cmd: cmd, mapWriter: func(sync int, _ *vforkArgs) {
		var b [1]byte
		_, _ = readRetry(sync, b[:]) // the child asks...
		syscall.Close(sync)          // ...and its parent is gone
	}}
	done := make(chan error, 1)
	go func() {
		_, err := startOnThread(nil, nil, nil, p.Start, p.Reusable, make(chan struct{}))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "could not have its id maps written by its parent") || !errors.Is(err, syscall.EPIPE) {
			t.Errorf("start: %v; want the id-map step to fail with EPIPE", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child still waits for its id maps 30s after its parent went away")
	}
	var ws syscall.WaitStatus
	if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD && pid != 0 {
		t.Errorf("a child was left behind: pid %d err %v", pid, err)
	}
}

// TestVforkNofile: the init gets the soft RLIMIT_NOFILE this process
// started with, as os/exec's children do (Go raises its own). The test
// binary runs again under a shell that lowered its soft limit, and
// compares what a vfork child and an os/exec child see.
func TestVforkNofile(t *testing.T) {
	if os.Getenv("FLUFFY_NOFILE_HELPER") == "1" {
		cmd, out := vforkCmd(t, "/bin/sh", "-c", "ulimit -Sn")
		p := &vforkProcess{cmd: cmd}
		if _, err := startOnThread(nil, nil, nil, p.Start, p.Reusable, make(chan struct{})); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		viaExec, err := exec.Command("/bin/sh", "-c", "ulimit -Sn").Output()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("NOFILE vfork=%s exec=%s", strings.TrimSpace(out.String()), strings.TrimSpace(string(viaExec)))
		return
	}
	newRuntime(t, Options{}) // skips without user namespaces
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < 1024 {
		t.Skipf("hard RLIMIT_NOFILE %d: too low to lower", lim.Max)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `ulimit -Sn 512; "$0" -test.run='^TestVforkNofile$' -test.v -test.count=1; exit $?`, self)
	cmd.Env = append(os.Environ(), "FLUFFY_NOFILE_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "NOFILE vfork=512 exec=512") {
		t.Fatalf("want both children to get the soft limit 512 the test binary started with:\n%s", out)
	}
}

func TestParseNofile(t *testing.T) {
	for _, tc := range []struct {
		in         string
		soft, hard uint64
		ok         bool
	}{
		{"Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n", 1024, 524288, true},
		{"Max open files            unlimited            unlimited            files\n", ^uint64(0), ^uint64(0), true},
		{"Max processes             63448                63448                processes\n", 0, 0, false},
		{"Max open files            lots                 524288               files\n", 0, 0, false},
		{"Max open files\n", 0, 0, false},
		{"", 0, 0, false},
	} {
		soft, hard, ok := parseNofile(tc.in)
		if ok != tc.ok || ok && (soft != tc.soft || hard != tc.hard) {
			t.Errorf("parseNofile(%q) = %d, %d, %v; want %d, %d, %v", tc.in, soft, hard, ok, tc.soft, tc.hard, tc.ok)
		}
	}
}

// TestWriteMaps: the parent's write of a root caller's child's id maps
// fails with a clear error, never silently, when the descriptor is no
// pidfd or the process's namespace cannot take the maps (one of the
// initial user namespace, whose maps are fixed).
func TestWriteMaps(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	sleep := exec.Command("/bin/sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	pidfd, err := unix.PidfdOpen(sleep.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	for _, c := range []struct {
		name string
		fd   int
		want string
	}{
		{"not a pidfd", int(devNull.Fd()), "the new process's pid: none in the fdinfo of its pidfd"},
		{"no descriptor", 1 << 20, "the new process's pid: open /proc/self/fdinfo/"},
		{"initial namespace", pidfd, "/uid_map: "},
	} {
		err := writeMaps(c.fd, []byte("0 1 1\n"), []byte("0 1 1\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
