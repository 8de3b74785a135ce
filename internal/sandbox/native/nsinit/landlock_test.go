package nsinit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as a landlocked child (see
// TestLandlock): it applies the ruleset to its locked thread, then tries
// what the test asks.
func TestMain(m *testing.M) {
	if os.Getenv("NSINIT_LANDLOCK_CHILD") == "1" {
		os.Exit(landlockChild())
	}
	os.Exit(m.Run())
}

func landlockChild() int {
	runtime.LockOSThread()
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		os.Stderr.WriteString("no landlock: " + errno.Error())
		return 3
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 4
	}
	cfg := &Config{Landlock: int(abi), LandlockNet: true}
	if err := applyLandlockPaths(cfg, []string{os.Getenv("RW")}, nil); err != nil {
		os.Stderr.WriteString(err.Error())
		return 5
	}
	var out []string
	try := func(name string, err error) {
		if err != nil {
			out = append(out, name+"=denied")
		} else {
			out = append(out, name+"=ok")
		}
	}
	try("write-rw", os.WriteFile(filepath.Join(os.Getenv("RW"), "f"), []byte("x"), 0o644))
	try("write-other", os.WriteFile(filepath.Join(os.Getenv("OTHER"), "f"), []byte("x"), 0o644))
	try("mkdir-other", os.Mkdir(filepath.Join(os.Getenv("OTHER"), "d"), 0o755))
	_, err := os.ReadFile(os.Getenv("READ"))
	try("read", err)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
		if abi < 4 {
			err = errors.New("no network rules before ABI 4")
		}
	}
	try("bind-tcp", err)
	os.Stdout.WriteString(strings.Join(out, " "))
	return 0
}

// TestLandlock checks the hand-written ruleset on the host: writes only
// under the read-write directories, reads everywhere, no TCP bind.
func TestLandlock(t *testing.T) {
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION); errno != 0 {
		t.Skipf("no landlock here: %v", errno)
	}
	rw, other := t.TempDir(), t.TempDir()
	read := filepath.Join(other, "r")
	if err := os.WriteFile(read, []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = []string{"NSINIT_LANDLOCK_CHILD=1", "RW=" + rw, "OTHER=" + other, "READ=" + read}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	want := "write-rw=ok write-other=denied mkdir-other=denied read=ok bind-tcp=denied"
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	if _, err := os.Stat(filepath.Join(other, "f")); err == nil {
		t.Error("a file was written outside the read-write directories")
	}
}
