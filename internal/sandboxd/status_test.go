package sandboxd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
	for _, tc := range []struct {
		name, lock string
		want       int
	}{
		{"garbled", "not a pid\n", 0},
		{"empty", "", 0},
		{"another process", strconv.Itoa(other.Process.Pid) + "\n", 0},
		{"no such process", "999999999\n", 0},
		{"this test, not a server", strconv.Itoa(os.Getpid()) + "\n", 0},
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

// Stop ends a real server and waits for it.
func TestStopEndsTheServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	// A process whose command line is a server's: sh runs sleep in the
	// foreground and ends on SIGTERM.
	p := exec.Command("/bin/sh", "-c", "trap 'exit 0' TERM; sleep 30 & wait", "fluffy-core", "sandbox", "serve", "--socket", sock)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = p.Wait(); close(exited) }()
	defer p.Process.Kill()
	if err := os.WriteFile(sock+".lock", []byte(strconv.Itoa(p.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Status(sock)
	if err != nil || st.PID != p.Process.Pid || st.Log != sock+".log" {
		t.Fatalf("Status = %+v, %v; want pid %d", st, err, p.Process.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := Stop(ctx, sock); err != nil || st.PID != p.Process.Pid {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not end")
	}
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
