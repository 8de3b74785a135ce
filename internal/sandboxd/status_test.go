package sandboxd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Status believes the lock file's pid only when that process serves the
// socket: a missing or garbled lock, or a pid reused by another process
// after a kill -9, is "not running"; Stop then signals nobody.
func TestStatusTrustsOnlyAServerOfTheSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	if st, err := Status(sock); err != nil || st.Running() {
		t.Fatalf("no lock file: %+v, %v", st, err)
	}
	// A process that is alive but not a server of sock (it merely names
	// the socket among its arguments, not after "serve").
	other := exec.Command("/bin/sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	// A server's command line, ended and not reaped yet: /proc shows an
	// empty command line, as it does for a process in the middle of
	// execve (Status cannot tell them apart, and neither is a server).
	zombie := exec.Command("/bin/sh", "-c", "exit 0", "fluffy-core", "sandbox", "serve", "--socket", sock)
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	var si unix.Siginfo
	if err := unix.Waitid(unix.P_PID, zombie.Process.Pid, &si, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, lock string
		want       int
	}{
		{"garbled", "not a pid\n", 0},
		{"empty", "", 0},
		{"another process", strconv.Itoa(other.Process.Pid) + "\n", 0},
		{"no such process", "999999999\n", 0},
		{"this test, not a server", strconv.Itoa(os.Getpid()) + "\n", 0},
		{"an ended server", strconv.Itoa(zombie.Process.Pid) + "\n", 0},
	} {
		if err := os.WriteFile(sock+".lock", []byte(tc.lock), 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := Status(sock)
		if err != nil || st.PID != tc.want {
			t.Errorf("%s: %+v, %v; want pid %d", tc.name, st, err, tc.want)
		}
		if st, err := Stop(context.Background(), sock); err != nil || st.Running() {
			t.Errorf("%s: Stop = %+v, %v", tc.name, st, err)
		}
	}
	if other.ProcessState != nil {
		t.Fatal("Stop signalled a process that is not a server")
	}
}

// Stop ends a real server and waits for it. The server is this test
// binary re-executed with "serve" before its flags, so that its command
// line is a server's to Status. Status must find it as soon as it signals
// readiness: Serve writes its own pid to the lock before it signals, when
// its command line is long in place. (A lock written by the parent for a
// child it has just started is another matter: exec.Cmd.Start returns once
// execve has closed the child's close-on-exec files, before the kernel
// has set up the new image's arguments, so /proc/PID/cmdline can still be
// empty then, and Status rightly says no server runs.)
func TestStopEndsTheServer(t *testing.T) {
	sock := filepath.Join(shortDir(t), "s.sock")
	p := startServerProcess(t, sock)
	exited := make(chan struct{})
	go func() { _ = p.Wait(); close(exited) }()
	st, err := Status(sock)
	if err != nil || st.PID != p.Process.Pid || st.Log != sock+".log" {
		t.Fatalf("Status = %+v, %v; want pid %d", st, err, p.Process.Pid)
	}
	if st, err := Stop(t.Context(), sock); err != nil || st.PID != p.Process.Pid {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
	<-exited // Stop returned: the server is gone, or a zombie waiting for Wait
	if code := p.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the server exited with %d, not 0 (SIGTERM stops it cleanly)", code)
	}
	if st, err := Status(sock); err != nil || st.Running() {
		t.Fatalf("Status after Stop = %+v, %v", st, err)
	}
}

// startServerProcess starts this test binary as a server of sock, with
// "serve" on its command line (as `fluffy-core sandbox serve`), and
// returns once the server signalled readiness. The test's end kills it if
// it still runs.
func startServerProcess(t *testing.T, sock string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := exec.Command(self, modeServer, "serve", "--socket", sock, "--ready-fd", "3")
	p.ExtraFiles = []*os.File{w}
	var logs syncBuffer
	p.Stderr = &logs
	err = p.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Process.Kill() })
	var b [1]byte
	if _, err := r.Read(b[:]); err != nil {
		t.Fatalf("the server did not signal readiness: %v\n%s", err, logs.String())
	}
	return p
}

// lockHeld sees a running server's lock, and no lock once it stopped.
func TestLockHeld(t *testing.T) {
	sock := filepath.Join(shortDir(t), "s.sock")
	if held, err := lockHeld(sock); err != nil || held {
		t.Fatalf("before any server: %v %v", held, err)
	}
	ts := startTestServer(t, nil, ServerOptions{Socket: sock})
	if held, err := lockHeld(sock); err != nil || !held {
		t.Fatalf("with a server: %v %v", held, err)
	}
	ts.stop(t)
	if held, err := lockHeld(sock); err != nil || held {
		t.Fatalf("after the server: %v %v", held, err)
	}
}
