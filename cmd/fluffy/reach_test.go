package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// reachProbeEnv, when set (to "PID,PID…"), makes the test binary the
// probe of TestSandboxUnreachableByOtherUIDs instead: it tries, as
// whoever runs it, each way into the processes and prints one line per
// attempt, "PID NAME ok" or "PID NAME ERRNO", then "done".
const reachProbeEnv = "FLUFFY_REACH_PROBE"

func init() {
	if v := os.Getenv(reachProbeEnv); v != "" {
		os.Exit(reachProbe(v, os.Getenv("FLUFFY_REACH_MARKER")))
	}
}

// reachProbes are the probe's attempts, in the order it prints them.
var reachProbes = []string{"kill", "ptrace", "pidfd_getfd", "mem", "environ", "fd", "root", "cwd-marker",
	"ns-user", "ns-mnt", "ns-net", "ns-pid", "ns-ipc", "ns-uts", "ns-cgroup"}

func reachProbe(pids, marker string) int {
	// ptrace binds the tracer thread.
	runtime.LockOSThread()
	result := func(err error) string {
		if err == nil {
			return "ok"
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return unix.ErrnoName(errno)
		}
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
	for _, p := range strings.Split(pids, ",") {
		pid, err := strconv.Atoi(p)
		if err != nil {
			fmt.Println("bad pid", p)
			return 2
		}
		proc := "/proc/" + p
		for _, name := range reachProbes {
			var err error
			switch name {
			case "kill":
				err = unix.Kill(pid, 0)
			case "ptrace":
				// Seize does not stop the process; the tracer's exit
				// detaches it.
				err = unix.PtraceSeize(pid)
			case "pidfd_getfd":
				var pfd int
				if pfd, err = unix.PidfdOpen(pid, 0); err == nil {
					var fd int
					if fd, err = unix.PidfdGetfd(pfd, 0, 0); err == nil {
						unix.Close(fd)
					}
					unix.Close(pfd)
				}
			case "mem":
				var f *os.File
				if f, err = os.Open(proc + "/mem"); err == nil {
					f.Close()
				}
			case "environ":
				_, err = os.ReadFile(proc + "/environ")
			case "fd":
				// Where the descriptors lead: the numbers themselves are
				// listed for the process's own uid (the directory's mode).
				var ents []os.DirEntry
				if ents, err = os.ReadDir(proc + "/fd"); err == nil && len(ents) > 0 {
					_, err = os.Readlink(proc + "/fd/" + ents[0].Name())
				}
			case "root":
				_, err = os.ReadDir(proc + "/root/")
			case "cwd-marker":
				_, err = os.ReadFile(proc + "/cwd/" + marker)
			default:
				var f *os.File
				if f, err = os.Open(proc + "/ns/" + strings.TrimPrefix(name, "ns-")); err == nil {
					f.Close()
				}
			}
			fmt.Println(p, name, result(err))
		}
	}
	fmt.Println("done")
	return 0
}

// nsenterFlags are nsenter's flags for the namespaces of reachProbes.
var nsenterFlags = map[string]string{"ns-user": "-U", "ns-mnt": "-m", "ns-net": "-n", "ns-pid": "-p", "ns-ipc": "-i", "ns-uts": "-u", "ns-cgroup": "-C"}

// TestSandboxUnreachableByOtherUIDs plays another local user against a
// running root-started sandbox: `fluffy sandbox run` runs a command that
// writes a marker into its change set and an environment variable, then
// sleeps. Neither nobody (uid 65534, the uid root's sandboxes used to run
// as, which many daemons share) nor a process of the sandbox's own host
// uid outside it can enter any of the sandbox's namespaces, ptrace it,
// take its descriptors, or read its memory, environment, descriptors,
// root or working directory (the marker) through /proc; nobody cannot
// signal it either. The same probe run as root succeeds at each, so a
// refusal is the kernel's answer, not a probe that did not run.
func TestSandboxUnreachableByOtherUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plays other local users: needs root to switch uids")
	}
	for _, tool := range []string{"setpriv", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	e := &egressRun{}
	e.bin, e.work, e.runDir, e.env = frontInstall(t)
	e.ws = filepath.Join(e.work, "ws")
	if err := os.MkdirAll(e.ws, 0o700); err != nil {
		t.Fatal(err)
	}
	const marker, secret = "reach-marker", "reach-secret-5d1f"
	nap := fmt.Sprintf("%d.%d", 60, os.Getpid()) // a sleep no one else runs
	cmd := exec.Command(filepath.Join(e.bin, "fluffy"), "sandbox", "run", "--",
		"/bin/sh", "-c", "echo "+secret+" > "+marker+" && REACH_SECRET="+secret+" exec sleep "+nap)
	cmd.Dir, cmd.Env = e.ws, e.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })

	// The sleep (the command) and its parent, the sandbox's PID 1.
	var sleepPID int
	for deadline := time.Now().Add(60 * time.Second); sleepPID == 0; time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("fluffy sandbox run ended early: %v: %s", cmd.ProcessState, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandboxed sleep never appeared: %s", out.String())
		}
		sleepPID = findCmdline(t, "sleep\x00"+nap+"\x00")
	}
	status := func(pid int, field string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return strings.Fields(v)[0]
			}
		}
		t.Fatalf("no %s in /proc/%d/status", field, pid)
		return ""
	}
	pid1, _ := strconv.Atoi(status(sleepPID, "PPid"))
	sandboxUID := status(sleepPID, "Uid")
	t.Logf("sandboxed sleep: pid %d, host uid %s; its PID 1: pid %d", sleepPID, sandboxUID, pid1)
	if got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/%s", sleepPID, marker)); err != nil || strings.TrimSpace(string(got)) != secret {
		t.Fatalf("root reads the marker: %q %v, want %q", got, err, secret)
	}
	// The user namespace's owner is root.
	if f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", sleepPID)); err != nil {
		t.Fatal(err)
	} else {
		owner, err := unix.IoctlGetUint32(int(f.Fd()), unix.NS_GET_OWNER_UID)
		f.Close()
		if err != nil {
			t.Fatalf("NS_GET_OWNER_UID: %v", err)
		}
		if owner != 0 {
			t.Errorf("the sandbox's user namespace is owned by uid %d, want root (0)", owner)
		}
	}

	probeBin := copyProbe(t)
	pids := fmt.Sprintf("%d,%d", sleepPID, pid1)
	probe := func(as ...string) map[string]string {
		t.Helper()
		args := append(append([]string{}, as...), probeBin, "-test.run=^$")
		c := exec.Command(args[0], args[1:]...)
		c.Dir = "/"
		c.Env = []string{"PATH=/usr/bin:/bin", reachProbeEnv + "=" + pids, "FLUFFY_REACH_MARKER=" + marker}
		b, err := c.CombinedOutput()
		if err != nil || !strings.HasSuffix(string(b), "done\n") {
			t.Fatalf("probe %q did not run to its end: %v\n%s", as, err, b)
		}
		res := map[string]string{}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) == 3 {
				res[f[0]+" "+f[1]] = f[2]
			}
		}
		return res
	}
	nsenter := func(as []string, pid int, flag string) string {
		args := append(append([]string{}, as...), "nsenter", "--preserve-credentials", "-t", strconv.Itoa(pid), flag, "--", "/bin/true")
		c := exec.Command(args[0], args[1:]...)
		c.Dir = "/"
		b, err := c.CombinedOutput()
		switch {
		case err == nil:
			return "ok"
		case bytes.Contains(b, []byte("Permission denied")):
			return "EACCES"
		case bytes.Contains(b, []byte("Operation not permitted")):
			return "EPERM"
		}
		return fmt.Sprintf("%v: %s", err, bytes.TrimSpace(b))
	}

	// The control: root is refused nothing, so the probe works (PID 1
	// may have no descriptor 0 and its working directory no marker).
	root := probe("env")
	for _, pid := range []int{sleepPID, pid1} {
		for _, name := range reachProbes {
			got := root[fmt.Sprintf("%d %s", pid, name)]
			if got == "" || got == "EACCES" || got == "EPERM" || (pid == sleepPID && got != "ok") {
				t.Errorf("control: root's %s on pid %d: %q, want it not refused", name, pid, got)
			}
		}
		for name, flag := range nsenterFlags {
			if got := nsenter(nil, pid, flag); got != "ok" {
				t.Errorf("control: root's nsenter %s (%s) into pid %d: %s, want ok", flag, name, pid, got)
			}
		}
	}

	attackers := []struct {
		name string
		uid  string
		// kill is what kill(2) must answer: a process of the sandbox's
		// own uid may signal it (the kernel's rule for the same uid).
		kill string
	}{
		{"nobody", "65534", "EPERM"},
		{"the sandbox's own host uid", sandboxUID, "ok"},
	}
	for _, a := range attackers {
		as := []string{"setpriv", "--reuid=" + a.uid, "--regid=" + a.uid, "--clear-groups", "--"}
		got := probe(as...)
		for _, pid := range []int{sleepPID, pid1} {
			for _, name := range reachProbes {
				want := map[string]string{"kill": a.kill, "ptrace": "EPERM", "pidfd_getfd": "EPERM"}[name]
				if want == "" {
					want = "EACCES"
				}
				if g := got[fmt.Sprintf("%d %s", pid, name)]; g != want {
					t.Errorf("%s (uid %s): %s on pid %d: %s, want %s", a.name, a.uid, name, pid, g, want)
				}
			}
			for name, flag := range nsenterFlags {
				if g := nsenter(as, pid, flag); g != "EACCES" && g != "EPERM" {
					t.Errorf("%s (uid %s): nsenter %s (%s) into pid %d: %s, want refused", a.name, a.uid, flag, name, pid, g)
				}
			}
		}
	}
	select {
	case <-done:
		t.Fatalf("the sandboxed command ended during the probes: %v: %s", cmd.ProcessState, out.String())
	default:
	}
}

// findCmdline returns the pid of a process whose command line is exactly
// cmdline (NUL-separated), or 0.
func findCmdline(t *testing.T, cmdline string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == cmdline {
			return pid
		}
	}
	return 0
}

// copyProbe copies the test binary where any uid can run it (go test's
// build directories are root's, mode 0700).
func copyProbe(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fluffy-reach-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
