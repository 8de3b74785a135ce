package native

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// TestMountsUnderPrivateDir: extra mounts whose host path sits under a
// directory only its owner may enter (root's 0700 data directory, where
// the build caches live) reach the sandbox — as root through idmapped
// trees, since root's sandboxes run as host SandboxUID. A writable mount takes
// writes, owned on disk by the caller (never by SandboxUID); a read-only one
// refuses them; both stay where they were mounted.
func TestMountsUnderPrivateDir(t *testing.T) {
	rt := newRuntime(t, Options{})
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	ws, cs := filepath.Join(private, "ws"), filepath.Join(private, "cs", "upper")
	cache, ro := filepath.Join(private, "cache"), filepath.Join(private, "ro")
	for _, d := range []string{ws, cache, ro} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("read me"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, rt, sandbox.Spec{
		Argv: []string{"/bin/sh", "-c", "echo cached > /var/cache/t/obj && cat /opt/ro/f && (echo x > /opt/ro/g 2>/dev/null && echo RO-WRITTEN || echo ro-refused)"},
		Env:  []string{"PATH=/usr/bin:/bin"}, Workspace: ws, ChangeSet: cs,
		Mounts: []sandbox.Mount{{Source: cache, Target: "/var/cache/t", Writable: true}, {Source: ro, Target: "/opt/ro"}},
	})
	if r.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", r.ExitCode, r.Stdout, r.Stderr)
	}
	if out := string(r.Stdout); !strings.Contains(out, "read me") || !strings.Contains(out, "ro-refused") {
		t.Errorf("stdout %q: want the read-only file read and the write refused", out)
	}
	fi, err := os.Stat(filepath.Join(cache, "obj"))
	if err != nil {
		t.Fatalf("the writable mount's file is not on the host: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
		t.Errorf("the cached file is owned by uid %d on disk, want %d", st.Uid, os.Getuid())
	}
	if _, err := os.Stat(filepath.Join(ro, "g")); err == nil {
		t.Error("a write reached the read-only mount's source")
	}
}

// The system directories the init binds are the ones sandbox.SystemDirs
// names: userenv mounts no toolchain below them, trusting they are there.
func TestSystemDirsAgree(t *testing.T) {
	if got, want := strings.Join(nsinit.SystemDirs(), " "), strings.Join(sandbox.SystemDirs(), " "); got != want {
		t.Errorf("nsinit binds %s, sandbox.SystemDirs says %s", got, want)
	}
}
