package reaper

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestProgramMatchesSource rebuilds the reaper from its assembly where
// GNU binutils are installed: the embedded program is what the source
// says.
func TestProgramMatchesSource(t *testing.T) {
	for _, tool := range []string{"as", "ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (binutils) to rebuild the reaper with", tool)
		}
	}
	out := filepath.Join(t.TempDir(), "reaper.elf")
	if b, err := exec.Command("sh", "gen.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Program()) {
		t.Errorf("reaper_amd64.elf (%d bytes) is not what reaper_amd64.asm builds to (%d bytes): run go generate", len(Program()), len(got))
	}
}

// inPIDNamespace runs script with sh as PID 1 of a new PID namespace
// (and a user namespace, for non-root callers), the reaper at $REAPER,
// and returns its output.
func inPIDNamespace(t *testing.T, script string, extra ...*os.File) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reaper")
	if err := os.WriteFile(bin, Program(), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "REAPER=" + bin}
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if os.Getuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(err.Error(), "operation not permitted") {
			t.Skipf("no PID namespace here: %v", err)
		}
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

// TestReaperOnlyAsPID1 runs the reaper as PID 2 of a fresh PID
// namespace: it must report nothing done and kill nothing (kill(-1)
// would end its parent, PID 1, and with it the namespace).
func TestReaperOnlyAsPID1(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// fd 3 = the status pipe, fd 4 = the pid pipe, moved to 4 and 6.
	if _, err := pw.Write([]byte{2, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	out := inPIDNamespace(t, `sleep 30 & "$REAPER" 4>&3 6<&4; echo "reaper exited $?"; kill -0 $! && echo "sleep alive"; kill $!`, sw, pr)
	sw.Close()
	pr.Close()
	if !strings.Contains(out, "reaper exited 0") || !strings.Contains(out, "sleep alive") {
		t.Errorf("output %q: want the reaper to exit 0 and the sleep to survive", out)
	}
	b := make([]byte, 64)
	n, _ := sr.Read(b)
	r, ok := ParseReport(b[:n])
	if !ok || r != (Report{}) {
		t.Errorf("report %v (%d bytes, ok %v), want all zero", r, n, ok)
	}
}

// TestReaperAsPID1 makes the reaper PID 1 with a command (its child) that
// leaves a background process and exits 7: the report says 7 (as a wait
// status), reaped, and the background process is gone with the reaper.
func TestReaperAsPID1(t *testing.T) {
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// PID 1 (sh) starts the command, hands its pid over on fd 6 and
	// becomes the reaper. The command outlives sh's exec (sh reaps the
	// children that end before it).
	script := `
		sh -c 'sleep 30 & sleep 0.5; exit 7' &
		cmd=$!
		printf "$(printf '\\%03o' $cmd)\0\0\0\0\0\0\0" > "$TMPDIR/pid"
		exec 4>&3 6< "$TMPDIR/pid" 7< "$TMPDIR" "$REAPER"`
	dir := t.TempDir()
	script = strings.ReplaceAll(script, "$TMPDIR", dir)
	out := inPIDNamespace(t, script, sw)
	sw.Close()
	b := make([]byte, 64)
	n, _ := sr.Read(b)
	r, ok := ParseReport(b[:n])
	ws := syscall.WaitStatus(r.WaitStatus)
	// fd 7 (a directory on a file system with room) stands for a
	// throw-away change set's workspace: its inodes in use, not full.
	if !ok || !r.Reaped || ws.ExitStatus() != 7 || r.TmpFull || r.UpperFull || r.UpperInodes == 0 {
		t.Errorf("report %+v (exit %d, %d bytes), want reaped with exit 7; output %q", r, ws.ExitStatus(), n, out)
	}
}
