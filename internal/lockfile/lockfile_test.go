package lockfile

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holdEnv names the lock file a helper process (this test binary run as
// TestHolderProcess) takes and holds until its stdin closes.
const holdEnv = "LOCKFILE_TEST_HOLD"

// TestHolderProcess is not a test: it is the other process the tests run
// to hold a lock.
func TestHolderProcess(t *testing.T) {
	path := os.Getenv(holdEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	l, err := Acquire(context.Background(), path, Options{WritePID: true})
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(2)
	}
	os.Stdout.WriteString("held\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	l.Release()
	os.Exit(0)
}

// holder is another process holding a lock.
type holder struct {
	pid   int
	stdin io.Closer
	cmd   *exec.Cmd
}

// let makes the holder let go and waits for it to exit.
func (h *holder) let() {
	h.stdin.Close()
	_ = h.cmd.Wait()
}

// hold starts a process that holds path's lock, and returns once it does.
func hold(t *testing.T, path string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderProcess$")
	cmd.Env = append(os.Environ(), holdEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{pid: cmd.Process.Pid, stdin: stdin, cmd: cmd}
	t.Cleanup(h.let)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "held\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
	return h
}

func TestAcquire(t *testing.T) {
	tests := []struct {
		name     string
		held     bool // another process holds the lock at first
		opts     Options
		onBusy   string // what OnBusy does: "", "cancel" (the ctx), "let" (the holder go)
		wantBusy bool
		wantCtx  error // the context error the BusyError carries
		calls    int   // OnBusy calls
	}{
		{name: "free", opts: Options{WritePID: true}},
		{name: "free, waiting", opts: Options{Wait: Forever}},
		{name: "held, no wait", held: true, wantBusy: true},
		{name: "held, no wait, OnBusy not called", held: true, opts: Options{OnBusy: func(int) {}}, wantBusy: true},
		{name: "held past the wait", held: true, opts: Options{Wait: time.Millisecond}, wantBusy: true, calls: 1},
		{name: "held until ctx is cancelled", held: true, opts: Options{Wait: Forever}, onBusy: "cancel", wantBusy: true, wantCtx: context.Canceled, calls: 1},
		{name: "held, then let go", held: true, opts: Options{Wait: Forever, WritePID: true}, onBusy: "let", calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.lock")
			var h *holder
			if tt.held {
				h = hold(t, path)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var calls []int
			opts := tt.opts
			onBusy := opts.OnBusy
			opts.OnBusy = func(pid int) {
				calls = append(calls, pid)
				switch tt.onBusy {
				case "cancel":
					cancel()
				case "let":
					h.let()
				}
				if onBusy != nil {
					onBusy(pid)
				}
			}
			l, err := Acquire(ctx, path, opts)
			if len(calls) != tt.calls {
				t.Errorf("OnBusy called %d times, want %d", len(calls), tt.calls)
			}
			for _, pid := range calls {
				if pid != h.pid {
					t.Errorf("OnBusy(%d), want the holder's pid %d", pid, h.pid)
				}
			}
			if !tt.wantBusy {
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				defer l.Release()
				if opts.WritePID {
					b, _ := os.ReadFile(path)
					if string(b) != strconv.Itoa(os.Getpid())+"\n" {
						t.Errorf("lock file holds %q, want our pid", b)
					}
				}
				// It is held: another try fails.
				if _, err := Acquire(t.Context(), path, Options{}); !errors.Is(err, ErrBusy) {
					t.Errorf("second Acquire while held: %v, want ErrBusy", err)
				}
				return
			}
			var be *BusyError
			if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
				t.Fatalf("Acquire: %v, want a *BusyError", err)
			}
			if be.PID != h.pid || be.Path != path || !errors.Is(be.Err, tt.wantCtx) || (tt.wantCtx == nil) != (be.Err == nil) {
				t.Errorf("BusyError %+v, want pid %d, path %s, ctx error %v", be, h.pid, path, tt.wantCtx)
			}
			if !strings.Contains(err.Error(), "pid "+strconv.Itoa(h.pid)) {
				t.Errorf("error %q does not name the holder", err)
			}
		})
	}
}

// TestRelease checks a released lock can be taken again, and that a
// second Release is harmless.
func TestRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := Acquire(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	l2, err := Acquire(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestRemove checks that with Options.Remove the file goes with the
// lock, and that the lock on the new file excludes as before.
func TestRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	opts := Options{Remove: true, WritePID: true}
	l, err := Acquire(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock file after Release: %v", err)
	}
	l, err = Acquire(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	defer l.Release()
	if _, err := Acquire(t.Context(), path, opts); !errors.Is(err, ErrBusy) {
		t.Fatalf("Acquire while held: %v", err)
	}
}

// TestAcquireOtherErrors checks a failure other than a held lock is not
// reported as one.
func TestAcquireOtherErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "x.lock")
	_, err := Acquire(t.Context(), path, Options{Wait: Forever})
	if err == nil || errors.Is(err, ErrBusy) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Acquire in a missing directory: %v, want fs.ErrNotExist and not ErrBusy", err)
	}
}
