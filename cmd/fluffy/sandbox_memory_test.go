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

// asOrdinaryUser prepares, when the test runs as root, to run the
// installed binaries in bin (and the named extra files) as an ordinary
// user through setpriv: wrap is the command prefix, and the binaries are
// copied to dir, which that user can reach; work is a directory of its
// own. Not root: no wrap, bin as it is, work a temporary directory.
func asOrdinaryUser(t *testing.T, bin string, extra ...string) (wrap []string, dir, work string) {
	t.Helper()
	if os.Getuid() != 0 {
		return nil, bin, t.TempDir()
	}
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
	// t.TempDir's parents are root's, mode 0700.
	dir, err = os.MkdirTemp("/var/tmp", "fluffy-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	files := []string{filepath.Join(bin, "fluffy"), filepath.Join(bin, "fluffy-core"), filepath.Join(bin, "fluffy-sandbox-init")}
	for _, src := range append(files, extra...) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work = filepath.Join(dir, "home")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", u.Uid+":"+u.Gid, work).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return wrap, dir, work
}

// userEnv is the environment of an ordinary user's fluffy under work,
// without TMPDIR (a throw-away change set goes to memory), and makes
// its workspace and runtime directory; the sandbox servers it starts
// are killed when the test ends.
func userEnv(t *testing.T, wrap []string, work string) (env []string, ws string) {
	t.Helper()
	ws, runDir := filepath.Join(work, "ws"), filepath.Join(work, "run")
	env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "FLUFFY_HOME=" + filepath.Join(work, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(work, "config"), "XDG_RUNTIME_DIR=" + runDir}
	for _, d := range []string{ws, runDir} {
		argv := append(append([]string(nil), wrap...), "mkdir", "-m", "0700", "-p", d)
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("mkdir %s: %v %s", d, err, out)
		}
	}
	t.Cleanup(func() {
		m, _ := filepath.Glob(filepath.Join(runDir, "fluffy", "*.sock"))
		for _, sock := range m {
			for _, pid := range serverPids(t, sock) {
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
		}
	})
	return env, ws
}

// TestThrowawayChangeSetBounded: without a memory cgroup (an ordinary
// user without delegation, where --memory falls back to RLIMIT_AS, which
// does not count tmpfs pages), the throw-away change set of `sandbox
// run` without --changeset still holds no more than the memory limit:
// the command's write beyond it fails with ENOSPC and fluffy says the
// change set hit its size bound and exits 123, whether the command runs
// in fluffy-core itself or through the sandbox server (twice: the second
// run takes the sandbox the server built ahead).
func TestThrowawayChangeSetBounded(t *testing.T) {
	bin, _, _, _ := frontInstall(t)
	wrap, bin, work := asOrdinaryUser(t, bin)
	env, ws := userEnv(t, wrap, work)
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
