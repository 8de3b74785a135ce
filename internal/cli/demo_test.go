package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// TestSweepDemoLeftovers: a killed demo's directory goes; a live demo's,
// one whose kernel still holds its lock, and other names stay.
func TestSweepDemoLeftovers(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := strconv.Itoa(dead.Process.Pid)
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "home"), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := mk("fluffy-demo-" + deadPID + "-111")
	live := mk("fluffy-demo-" + strconv.Itoa(os.Getpid()) + "-222")
	locked := mk("fluffy-demo-" + deadPID + "-333")
	other := mk("fluffy-demo-x-444")
	// Another user's directory with the demo's name and a dead pid: a
	// demo run as root leaves it alone.
	foreign := mk("fluffy-demo-" + deadPID + "-555")
	if os.Geteuid() == 0 {
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		foreign = other // only root can make another user's directory
	}
	f, err := os.OpenFile(filepath.Join(locked, "home", kernel.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if n := sweepDemoLeftovers(dir); n != 1 {
		t.Errorf("removed %d, want 1", n)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the killed demo's directory is still there")
	}
	for _, p := range []string{live, locked, other, foreign} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed", p)
		}
	}
}
