package userenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sandboxMasks hides exactly fluffy's own files that exist inside the
// workspace: the data directory once (not its keys again below it), the
// binaries beside the running one, the project's .fluffy; nothing outside
// the workspace, nothing absent, no symlink.
func TestSandboxMasks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	data := filepath.Join(home, ".local/share/fluffy")
	for _, d := range []string{data + "/keys", home + "/bin", home + "/.fluffy", home + "/src"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{home + "/bin/fluffy", home + "/bin/fluffy-core", data + "/keys/audit.key"} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("fluffy", home+"/bin/fluffy-sandbox-init"); err != nil {
		t.Fatal(err)
	}
	a := &Env{Cwd: home, Self: home + "/bin/fluffy", Environ: []string{"HOME=" + home, "FLUFFY_HOME=" + data, "XDG_CONFIG_HOME=" + root + "/config"}}
	masks, err := a.SandboxMasks(home)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range masks {
		kind := "file"
		if fi, err := os.Stat(m.Source); err == nil && fi.IsDir() {
			kind = "dir"
		}
		if m.Writable {
			t.Errorf("mask %s is writable", m.Target)
		}
		got[strings.TrimPrefix(m.Target, home+"/")] = kind
	}
	want := map[string]string{".local/share/fluffy": "dir", ".fluffy": "dir", "bin/fluffy": "file", "bin/fluffy-core": "file"}
	if len(got) != len(want) {
		t.Errorf("masks %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("mask %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}

	// A workspace without fluffy's files: no mounts at all.
	if masks, err := a.SandboxMasks(home + "/src"); err != nil || len(masks) != 0 {
		t.Errorf("sandboxMasks(src) = %v, %v", masks, err)
	}
	// The data directory, or a directory inside it, as the workspace:
	// refused.
	for _, ws := range []string{data, data + "/keys"} {
		if _, err := a.SandboxMasks(ws); err == nil {
			t.Errorf("sandboxMasks(%s) succeeded", ws)
		}
	}
}

// TestProtectedIsTheWorkspaces: a process serving a workspace other than
// its working directory (the kernel, the assistant daemon) protects that
// workspace's project files, and does not count its own directory's
// project as fluffy's files of the workspace: a daemon started in the
// home directory, whose .fluffy holds the assistant workspace, must not
// find every session on that workspace "inside fluffy's own files".
func TestProtectedIsTheWorkspaces(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	ws := filepath.Join(home, ".fluffy", "workspace")
	repo := filepath.Join(root, "repo")
	for _, d := range []string{filepath.Join(ws, ".fluffy"), filepath.Join(repo, ".git"), filepath.Join(repo, "sub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	daemon := &Env{Cwd: home, Self: "/usr/bin/fluffy", Environ: []string{"HOME=" + home, "FLUFFY_HOME=" + filepath.Join(home, ".local/share/fluffy"), "XDG_CONFIG_HOME=" + root + "/config"}}
	if _, err := daemon.SandboxMasks(ws); err != nil {
		t.Fatalf("a session on the assistant workspace, served from the home directory: %v", err)
	}
	prot, err := daemon.Protected(filepath.Join(repo, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	if !prot.Covers(filepath.Join(repo, ".fluffy", "policy.yaml")) {
		t.Errorf("the workspace's project policy %s is not protected: %v", filepath.Join(repo, ".fluffy"), prot.Paths)
	}
	if prot.Covers(filepath.Join(home, ".fluffy", "notes.md")) {
		t.Errorf("the daemon's own working directory's project counts as the workspace's: %v", prot.Paths)
	}
}
