package docker

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/secret"
)

// TestEnvContent: the file a shell sources gives each variable its value
// byte for byte, whatever the value holds, and is made in the arena.
func TestEnvContent(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to source the file")
	}
	values := []string{"plain", "it's", "''", `"$HOME" $(id) ` + "`id`", "a\nb\n", `back\slash`, "x=y;z", strings.Repeat("'", 100)}
	a := &secret.Arena{}
	defer a.Wipe()
	var held []string
	for i, v := range values {
		held = append(held, a.String([]byte("V"+string(rune('0'+i))+"="), []byte(v)))
	}
	content := envContent(held, a)
	if !a.Holds(unsafe.String(&content[0], len(content))) {
		t.Error("the file's content is not in the arena")
	}
	f := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(f, content, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		out, err := exec.Command(sh, "-c", `. "$1"; printf %s "$V`+string(rune('0'+i))+`"`, "sh", f).Output()
		if err != nil || string(out) != v {
			t.Errorf("V%d = %q (%v), want %q", i, out, err, v)
		}
	}
}

// TestSplitEnv: only the entries whose bytes are in the arena are held
// back from the engine's API.
func TestSplitEnv(t *testing.T) {
	a := &secret.Arena{}
	defer a.Wipe()
	tok := a.String([]byte("TOKEN="), []byte("v"))
	held, plain := splitEnv([]string{"PATH=/bin", tok, "API_KEY=fluffy-secret-00"}, a)
	if len(held) != 1 || held[0] != tok || len(plain) != 2 {
		t.Errorf("held %q plain %q", held, plain)
	}
	if held, plain := splitEnv([]string{"PATH=/bin", tok}, nil); held != nil || len(plain) != 2 {
		t.Errorf("without an arena: held %q plain %q", held, plain)
	}
}

// fakeRoot is a container root with the wrapper's shell and envDir.
func fakeRoot(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin/sh"), nil, 0o755)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return dir, fd
}

// TestEnvFileWipe: the file is written as given, mode 0400 and its
// user's; once the wrapper has removed it, wipe still overwrites its
// bytes with zeros.
func TestEnvFileWipe(t *testing.T) {
	dir, root := fakeRoot(t)
	os.Mkdir(filepath.Join(dir, envDir), 0o1733)
	f, err := writeEnvFileIn(root, os.Getuid(), os.Getgid(), []byte("export T='s3cret'\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, f.path())
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "export T='s3cret'\n" {
		t.Errorf("content %q", b)
	}
	// The wrapper opens and removes it; the open file shows the zeros.
	seen, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	os.Remove(p)
	if err := f.wipe(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := seen.ReadAt(b, 0)
	if n != len("export T='s3cret'\n") || !bytes.Equal(b[:n], make([]byte, n)) {
		t.Errorf("after wipe the file holds %q", b[:n])
	}
}

// TestEnvFileRefusesLinks: a command of the container may have replaced
// its envDir with a link to a directory it can read (its /tmp); the
// write does not follow it.
func TestEnvFileRefusesLinks(t *testing.T) {
	dir, root := fakeRoot(t)
	elsewhere := filepath.Join(dir, "tmp")
	os.Mkdir(elsewhere, 0o777)
	if err := os.Symlink("tmp", filepath.Join(dir, envDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := writeEnvFileIn(root, os.Getuid(), os.Getgid(), []byte("x")); err == nil {
		t.Error("the write followed a link")
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("a file was written through the link: %v", ents)
	}
}

// TestEnvFileNeedsShell: an image without /bin/sh cannot take the file.
func TestEnvFileNeedsShell(t *testing.T) {
	dir, root := fakeRoot(t)
	os.Mkdir(filepath.Join(dir, envDir), 0o1733)
	os.Remove(filepath.Join(dir, "bin/sh"))
	if _, err := writeEnvFileIn(root, os.Getuid(), os.Getgid(), []byte("x")); err == nil || !strings.Contains(err.Error(), "/bin/sh") {
		t.Errorf("err = %v", err)
	}
}
