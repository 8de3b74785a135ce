package uppers_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
)

// TestMain lets the test binary be the other process: with
// UPPERS_TEST_HOLD set it locks that upper, says so, and waits for its
// standard input to close.
func TestMain(m *testing.M) {
	if up := os.Getenv("UPPERS_TEST_HOLD"); up != "" {
		h, _, _, err := uppers.NewRegistry().Try(up, false)
		if err != nil || h == nil {
			os.Stdout.WriteString("error\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		h.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func newUpper(t *testing.T) string {
	t.Helper()
	up := filepath.Join(t.TempDir(), "upper")
	if err := os.Mkdir(up, 0o755); err != nil {
		t.Fatal(err)
	}
	return up
}

// A second process fails, naming the holder, while the first holds the
// upper; once the first lets go it holds it, and no lock file is left.
func TestOtherProcessRefused(t *testing.T) {
	up := newUpper(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UPPERS_TEST_HOLD="+up)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the other process: %q", line)
	}
	r := uppers.NewRegistry()
	h, _, _, err := r.Try(up, true)
	var busy *uppers.BusyError
	if !errors.As(err, &busy) || h != nil {
		t.Fatalf("Try while another process holds it: %v, %v; want a *BusyError", h, err)
	}
	if busy.PID != cmd.Process.Pid || busy.Upper != up || !errors.Is(err, lockfile.ErrBusy) {
		t.Errorf("BusyError %+v, want the holder, pid %d", busy, cmd.Process.Pid)
	}
	if want := "pid " + strconv.Itoa(cmd.Process.Pid) + " ("; !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not name the holder (%q)", err, want)
	}
	if _, err := uppers.Lock(up); !errors.As(err, &busy) {
		t.Errorf("Lock while another process holds it: %v", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	h, err = r.Acquire(t.Context(), up, nil)
	if err != nil || h == nil {
		t.Fatalf("Acquire after the other process ended: %v", err)
	}
	h.Release()
	if _, err := os.Stat(uppers.LockPath(up)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after the last hold: %v", err)
	}
}

// In one process: a busy holder is waited for, an idle one is asked to
// go, and a start ahead of its command waits for a busy holder but is
// refused beside an idle one.
func TestHoldersInOneProcess(t *testing.T) {
	up := newUpper(t)
	r := uppers.NewRegistry()
	first, err := r.Acquire(t.Context(), up, nil)
	if err != nil || first == nil || !r.Held(up) {
		t.Fatalf("Acquire: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Acquire(ctx, up, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire beside a busy holder: %v, want it to wait", err)
	}
	if _, err := r.AcquireAhead(ctx, up); !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireAhead beside a busy holder: %v, want it to wait", err)
	}
	evicted := make(chan struct{})
	first.Idle(func() { close(evicted) })
	if _, err := r.AcquireAhead(t.Context(), up); !errors.Is(err, uppers.ErrHeld) {
		t.Fatalf("AcquireAhead beside an idle holder: %v, want ErrHeld", err)
	}
	got := make(chan *uppers.Hold)
	go func() {
		h, _ := r.Acquire(context.Background(), up, nil)
		got <- h
	}()
	<-evicted
	select {
	case <-got:
		t.Fatal("the upper was held again before the evicted holder let go")
	default:
	}
	first.Release()
	second := <-got
	if second == nil {
		t.Fatal("Acquire after the release: no hold")
	}
	second.Release()
	if r.Held(up) {
		t.Error("held after the last release")
	}
}
