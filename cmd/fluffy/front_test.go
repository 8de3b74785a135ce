package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// buildInstall builds fluffy the way the Makefile installs it: the front
// build as fluffy, the full build as fluffy-core and the sandbox init,
// side by side in a fresh directory.
func buildInstall(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries with")
	}
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"fluffy", ".", "fluffy_front"},
		{"fluffy-core", ".", ""},
		{"fluffy-sandbox-init", "../fluffy-sandbox-init", ""},
	} {
		cmd := exec.Command(goBin, "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.out, err, out)
		}
	}
	return dir
}

// The installed front binary runs 'sandbox run' itself, even without
// fluffy-core beside it, and hands everything else over to fluffy-core
// (same arguments, its exit status), saying what to do when it is
// missing.
func TestFrontBinary(t *testing.T) {
	release, err := sandboxtest.AcquireHostLock()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	bin := buildInstall(t)
	work := t.TempDir()
	ws := filepath.Join(work, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "FLUFFY_HOME=" + filepath.Join(work, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(work, "config")}
	fluffy := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "fluffy"), args...)
		cmd.Dir, cmd.Env = ws, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("fluffy %q: %v", args, err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	core := filepath.Join(bin, "fluffy-core")
	aside := filepath.Join(work, "fluffy-core.aside")

	// Without fluffy-core: the front's own commands work...
	if err := os.Rename(core, aside); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := fluffy("sandbox", "run", "--changeset", filepath.Join(work, "cs"), "--", "/bin/sh", "-c", "echo hi > new.txt; echo ran; exit 3")
	if code != 3 || out != "ran\n" {
		t.Fatalf("front sandbox run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(work, "cs", "new.txt")); err != nil {
		t.Errorf("the write did not land in the change set: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Error("the sandboxed write reached the workspace")
	}
	if out, _, code := fluffy("version"); code != 0 || !strings.HasPrefix(out, "fluffy ") {
		t.Errorf("front version: exit %d, %q", code, out)
	}
	// ... and the others say what is missing and how to fix it, as do
	// the runtimes and network modes only fluffy-core has.
	for _, args := range [][]string{
		{"audit", "verify"},
		{"sandbox", "run", "--runtime", "auto", "--", "/bin/true"},
		{"sandbox", "run", "--net", "proxy", "--no-workspace", "--", "/bin/true"},
	} {
		_, errOut, code := fluffy(args...)
		if code != 1 || !strings.Contains(errOut, "needs fluffy-core") || !strings.Contains(errOut, "make install") {
			t.Errorf("fluffy %q without fluffy-core: exit %d, stderr %q", args, code, errOut)
		}
	}
	if err := os.Rename(aside, core); err != nil {
		t.Fatal(err)
	}

	// With fluffy-core: handed over, arguments and exit status intact.
	out, errOut, code = fluffy("--debug", "audit", "verify")
	if code != 0 || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify through fluffy-core: exit %d, %q %q", code, out, errOut)
	}
	// The front recorded its run in the same log fluffy-core reads.
	out, _, code = fluffy("audit", "log", "--kind", "exec.end", "--json")
	if code != 0 || !strings.Contains(out, `"exit_code":3`) {
		t.Errorf("the front's exec.end is not in the log: exit %d, %q", code, out)
	}
	if _, errOut, code := fluffy("audit", "verify", "--no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("a usage error through fluffy-core: exit %d, %q", code, errOut)
	}
	// A runtime only fluffy-core has: the front hands over mid-command.
	if out, errOut, code := fluffy("sandbox", "run", "--runtime", "auto", "--no-workspace", "--", "/bin/sh", "-c", "echo auto; exit 4"); code != 4 || out != "auto\n" {
		t.Errorf("sandbox run --runtime auto through fluffy-core: exit %d, %q %q", code, out, errOut)
	}
	// fluffy-core is the front itself (a broken install): no exec loop.
	if err := os.Remove(core); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(bin, "fluffy"), core); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := fluffy("audit", "verify"); code != 1 || !strings.Contains(errOut, "same front binary") {
		t.Errorf("a front installed as fluffy-core: exit %d, %q", code, errOut)
	}
}
