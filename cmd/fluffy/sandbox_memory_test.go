package main

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// TestThrowawayChangeSetBounded: without a memory cgroup (an ordinary
// user without delegation, where --memory falls back to RLIMIT_AS, which
// does not count tmpfs pages), the throw-away change set of `sandbox
// run` without --changeset still holds no more than the memory limit:
// the command's write beyond it fails with ENOSPC and fluffy says the
// change set hit its size bound and exits 123, whether the command runs
// in fluffy-core itself or through the sandbox server (twice: the second
// run takes the sandbox the server built ahead).
func TestThrowawayChangeSetBounded(t *testing.T) {
	bin, work, _, _ := frontInstall(t)
	var wrap []string
	uid := os.Getuid()
	if uid == 0 {
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("setpriv (util-linux) missing: cannot switch to an ordinary user")
		}
		u, err := user.Lookup("fluffy-sbxtest")
		if err != nil {
			if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "fluffy-sbxtest").CombinedOutput(); err != nil {
				t.Skipf("cannot create an ordinary user: %v %s", err, out)
			}
			if u, err = user.Lookup("fluffy-sbxtest"); err != nil {
				t.Fatal(err)
			}
		}
		wrap = []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}
		// The ordinary user's own directories, and the binaries it can
		// reach (t.TempDir's parents are root's, mode 0700).
		dir, err := os.MkdirTemp("/var/tmp", "fluffy-membound-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		for _, b := range []string{"fluffy", "fluffy-core", "fluffy-sandbox-init"} {
			data, err := os.ReadFile(filepath.Join(bin, b))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, b), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bin, work = dir, filepath.Join(dir, "home")
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := exec.Command("chown", "-R", u.Uid+":"+u.Gid, work).Run(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ws, runDir := filepath.Join(work, "ws"), filepath.Join(work, "run")
	// No TMPDIR: the throw-away change set goes to memory.
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + work, "FLUFFY_HOME=" + filepath.Join(work, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(work, "config"), "XDG_RUNTIME_DIR=" + runDir}
	for _, d := range []string{ws, runDir} {
		cmd := exec.Command(append(wrap, "mkdir", "-m", "0700", "-p", d)[0], append(wrap, "mkdir", "-m", "0700", "-p", d)[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkdir %s: %v %s", d, err, out)
		}
	}
	t.Cleanup(func() {
		// The servers the front started (as the ordinary user).
		m, _ := filepath.Glob(filepath.Join(runDir, "fluffy", "*.sock"))
		for _, sock := range m {
			for _, pid := range serverPids(t, sock) {
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
		}
	})
	for _, exe := range []string{"fluffy-core", "fluffy", "fluffy"} {
		argv := append(append([]string(nil), wrap...), filepath.Join(bin, exe), "sandbox", "run", "--memory", "64MiB", "--",
			"/bin/sh", "-c", "head -c 200M /dev/zero > big; echo rc=$?")
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = ws, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code != 123 || stdout.String() != "rc=1\n" || !strings.Contains(stderr.String(), "the throw-away change set hit its size bound (64MiB") ||
			!strings.Contains(stderr.String(), "No space left on device") {
			t.Errorf("%s: a 200 MiB write with --memory 64MiB: exit %d, stdout %q, stderr %q; want ENOSPC, exit 123 and the change set's bound named",
				exe, code, stdout.String(), stderr.String())
		}
	}
}
