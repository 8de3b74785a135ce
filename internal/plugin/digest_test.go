package plugin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustDigest(t *testing.T, dir string) string {
	t.Helper()
	d, err := Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDigest(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"fluffy-plugin.yaml": "name: x\n", "bin/server": "#!/bin/sh\n"})
	base := mustDigest(t, dir)
	if !strings.HasPrefix(base, "sha256:") || len(base) != 7+64 {
		t.Fatalf("digest %q", base)
	}
	// What is left out does not count.
	writeFiles(t, dir, map[string]string{SignatureName: "sig", ".git/HEAD": "ref"})
	if d := mustDigest(t, dir); d != base {
		t.Fatal("the signature or .git changed the digest")
	}
	// A copy under another umask is the same plugin.
	if err := os.Chmod(filepath.Join(dir, "bin/server"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := mustDigest(t, dir); d != base {
		t.Fatal("a permission other than the executable bit changed the digest")
	}
	changes := []struct {
		name string
		do   func()
	}{
		{"content", func() { writeFiles(t, dir, map[string]string{"bin/server": "#!/bin/sh\nrm -rf ~\n"}) }},
		{"executable bit", func() { os.Chmod(filepath.Join(dir, "bin/server"), 0o755) }},
		{"new file", func() { writeFiles(t, dir, map[string]string{"extra": ""}) }},
		{"symlink", func() { os.Symlink("bin/server", filepath.Join(dir, "link")) }},
		{"renamed", func() { os.Rename(filepath.Join(dir, "extra"), filepath.Join(dir, "extra2")) }},
		{"empty dir", func() { os.Mkdir(filepath.Join(dir, "d"), 0o755) }},
	}
	seen := map[string]string{base: "start"}
	for _, c := range changes {
		c.do()
		d := mustDigest(t, dir)
		if prev, ok := seen[d]; ok {
			t.Fatalf("%s: digest the same as after %s", c.name, prev)
		}
		seen[d] = c.name
		if err := Verify(dir, base); !errors.Is(err, ErrDigestChanged) {
			t.Fatalf("%s: Verify = %v, want ErrDigestChanged", c.name, err)
		}
	}
}

func TestDigestRefusesLinksOut(t *testing.T) {
	for _, target := range []string{"/etc/passwd", "../x", "../../x", "a/../../../x"} {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"sub/f": ""})
		if err := os.Symlink(target, filepath.Join(dir, "sub", "link")); err != nil {
			t.Fatal(err)
		}
		if target == "../x" {
			// From sub/, ../x is the folder's own x: allowed.
			if _, err := Digest(dir); err != nil {
				t.Errorf("%s: %v", target, err)
			}
			continue
		}
		if _, err := Digest(dir); !errors.Is(err, ErrFolder) {
			t.Errorf("a link to %s: %v, want ErrFolder", target, err)
		}
	}
	dir := t.TempDir()
	if err := os.Symlink("../../etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Digest(dir); !errors.Is(err, ErrFolder) {
		t.Errorf("a link out of the top: %v, want ErrFolder", err)
	}
}

func TestReadManifest(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, ManifestName), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("a FIFO manifest: %v", err)
	}
	os.Remove(filepath.Join(dir, ManifestName))
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err == nil {
		t.Fatal("a manifest linked from outside the folder was read")
	}
	os.Remove(filepath.Join(dir, ManifestName))
	writeFiles(t, dir, map[string]string{ManifestName: goodManifest})
	if m, err := ReadManifest(dir); err != nil || m.Name != "github" {
		t.Fatalf("ReadManifest = %+v, %v", m, err)
	}
}

func TestDigestRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := Digest(dir); !errors.Is(err, ErrFolder) {
		t.Fatalf("Digest = %v, want ErrFolder", err)
	}
}

// TestVerifySignature signs a digest with a fresh SSH key and checks it
// verifies against an allowed-signers file naming that key, and not
// against another digest, another namespace or another key.
func TestVerifySignature(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen is not installed (apt-get install openssh-client)")
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	run := func(stdin string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("ssh-keygen", args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ssh-keygen %v: %v", args, stderrOf(err))
		}
		return out
	}
	run("", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", key)
	pub, _ := os.ReadFile(key + ".pub")
	signers := filepath.Join(dir, "allowed_signers")
	os.WriteFile(signers, []byte("alice@example.org namespaces=\"fluffy-plugin\" "+string(pub)), 0o644)
	digest := "sha256:" + strings.Repeat("ab", 32)
	sig := filepath.Join(dir, "sig")
	os.WriteFile(sig, run(string(SignedMessage(digest)), "-Y", "sign", "-q", "-f", key, "-n", SignatureNamespace), 0o644)

	ctx := t.Context()
	who, err := VerifySignature(ctx, sig, signers, digest)
	if err != nil || who != "alice@example.org" {
		t.Fatalf("VerifySignature = %q, %v", who, err)
	}
	if _, err := VerifySignature(ctx, sig, signers, "sha256:"+strings.Repeat("cd", 32)); !errors.Is(err, ErrSignature) {
		t.Fatalf("another digest: %v", err)
	}
	other := filepath.Join(dir, "git.sig")
	os.WriteFile(other, run(string(SignedMessage(digest)), "-Y", "sign", "-q", "-f", key, "-n", "git"), 0o644)
	if _, err := VerifySignature(ctx, other, signers, digest); !errors.Is(err, ErrSignature) {
		t.Fatalf("another namespace: %v", err)
	}
	run("", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", filepath.Join(dir, "key2"))
	pub2, _ := os.ReadFile(filepath.Join(dir, "key2.pub"))
	os.WriteFile(signers, []byte("bob@example.org "+string(pub2)), 0o644)
	if _, err := VerifySignature(ctx, sig, signers, digest); !errors.Is(err, ErrSignature) {
		t.Fatalf("untrusted key: %v", err)
	}
	if _, err := VerifySignature(ctx, sig, filepath.Join(dir, "none"), digest); !errors.Is(err, ErrSignature) {
		t.Fatalf("no signers file: %v", err)
	}
}
