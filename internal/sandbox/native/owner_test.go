//go:build amd64 || arm64

package native

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"golang.org/x/sys/unix"
)

// TestUserNSOwner: in every way a sandbox starts (direct, ahead, the Go
// init by vfork, by os/exec, through stage 1), its user
// namespace belongs to the caller, not to the host uid the sandbox runs
// as: for root, the namespace is root's and the processes run as
// SandboxUID, so that no other uid holds capabilities over the sandbox's
// namespaces (setns, ptrace, /proc); for an ordinary user both are the
// user's own. The command's host uid and its namespace's owner are read
// from the host while it runs.
func TestUserNSOwner(t *testing.T) {
	wantUID, wantOwner := os.Getuid(), os.Getuid()
	if wantUID == 0 {
		wantUID = SandboxUID
	}
	for _, mode := range []string{"direct", "ahead", "vfork", "exec", "stage1"} {
		t.Run(mode, func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: mode != "direct" && mode != "ahead"})
			setStage1(rt, mode == "stage1")
			rt.noVfork = mode == "exec"
			run := rt.Run
			if mode == "ahead" {
				run = aheadRuntime{rt}.Run
			}
			defer rt.Close()
			nap := fmt.Sprintf("%d.%d", 40+len(mode), os.Getpid()) // a sleep no one else runs
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := run(ctx, sandbox.Spec{Argv: []string{"/bin/sleep", nap}, Env: []string{"PATH=/usr/bin:/bin"}, Seccomp: "standard",
					Limits: sandbox.Limits{Wall: time.Minute}})
				done <- err
			}()
			pid := 0
			for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
				select {
				case err := <-done:
					t.Fatalf("the run ended before its command was seen: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the sandboxed sleep never appeared")
				}
				pid = pidOf("/bin/sleep\x00" + nap + "\x00")
			}
			uid, owner, err := uidAndOwner(pid)
			if err != nil {
				t.Fatal(err)
			}
			if uid != wantUID || owner != wantOwner {
				t.Errorf("the command runs as host uid %d in a user namespace owned by uid %d, want %d and %d", uid, owner, wantUID, wantOwner)
			}
			cancel()
			<-done
		})
	}
}

// pidOf returns the pid of a process whose command line is exactly
// cmdline (NUL-separated), or 0.
func pidOf(cmdline string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == cmdline {
			return pid
		}
	}
	return 0
}

// uidAndOwner returns pid's real host uid and the owner of its user
// namespace.
func uidAndOwner(pid int) (uid, owner int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	uid = -1
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	o, err := unix.IoctlGetUint32(int(f.Fd()), unix.NS_GET_OWNER_UID)
	if err != nil {
		return 0, 0, fmt.Errorf("NS_GET_OWNER_UID: %w", err)
	}
	return uid, int(o), nil
}
