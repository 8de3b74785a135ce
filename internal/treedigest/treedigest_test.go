package treedigest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, dir, rel, body string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func digest(t *testing.T, dir string, o Options) string {
	t.Helper()
	d, err := Digest(dir, "test v1\n", o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// What a copy changes (times, the umask's other bits) keeps the digest;
// what a person would review (a byte, the execute bit, a name, a link's
// target) changes it.
func TestDigestKeepsWhatMatters(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "run.sh", "echo hi\n", 0o755)
	write(t, dir, "lib/a.txt", "a", 0o644)
	o := Options{Links: LinksInside}
	base := digest(t, dir, o)
	old := time.Unix(1, 0)
	if err := os.Chtimes(filepath.Join(dir, "lib/a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "lib/a.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := digest(t, dir, o); d != base {
		t.Errorf("times or non-exec mode bits changed the digest")
	}
	changes := []struct {
		name string
		do   func() error
	}{
		{"exec bit", func() error { return os.Chmod(filepath.Join(dir, "run.sh"), 0o644) }},
		{"content", func() error { return os.WriteFile(filepath.Join(dir, "lib/a.txt"), []byte("b"), 0o644) }},
		{"name", func() error { return os.Rename(filepath.Join(dir, "lib/a.txt"), filepath.Join(dir, "lib/b.txt")) }},
		{"link", func() error { return os.Symlink("b.txt", filepath.Join(dir, "lib/c")) }},
	}
	seen := map[string]string{base: "base"}
	for _, c := range changes {
		if err := c.do(); err != nil {
			t.Fatal(err)
		}
		d := digest(t, dir, o)
		if prev, ok := seen[d]; ok {
			t.Errorf("after %s the digest equals the one after %s", c.name, prev)
		}
		seen[d] = c.name
	}
}

// A file name holding a newline and a forged line cannot make two
// folders list the same.
func TestCanonicalQuotesPaths(t *testing.T) {
	a := []Entry{{Rel: "x\nf 644 00 \"y\"", Sum: "00"}}
	b := []Entry{{Rel: "x", Sum: "00"}, {Rel: "y", Sum: "00"}}
	if Sum("h\n", a) == Sum("h\n", b) {
		t.Error("a name with a newline forged a second entry")
	}
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a", "a", 0o644)
	if err := os.Symlink("a", filepath.Join(dir, "in")); err != nil {
		t.Fatal(err)
	}
	if _, err := List(dir, Options{Links: RefuseLinks}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a link with RefuseLinks: %v, want ErrUnsupported", err)
	}
	if _, err := List(dir, Options{Links: LinksInside}); err != nil {
		t.Errorf("a link inside with LinksInside: %v", err)
	}
	if err := os.Symlink("../../etc/passwd", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	var fe *FileError
	if _, err := List(dir, Options{Links: LinksInside}); !errors.Is(err, ErrUnsupported) || !errors.As(err, &fe) || fe.Path != "out" {
		t.Errorf("a link out of the folder: %v, want ErrUnsupported naming out", err)
	}
	os.Remove(filepath.Join(dir, "out"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := List(dir, Options{Links: LinksInside}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a FIFO: %v, want ErrUnsupported", err)
	}
	os.Remove(filepath.Join(dir, "fifo"))
	if _, err := List(dir, Options{Links: LinksInside, MaxFiles: 1}); !errors.Is(err, ErrTooBig) {
		t.Errorf("two entries under MaxFiles 1: %v, want ErrTooBig", err)
	}
	if _, err := List(dir, Options{Links: LinksInside, MaxBytes: 0, Skip: func(rel string, _ bool) bool { return rel == "in" }, MaxFiles: 1}); err != nil {
		t.Errorf("one entry left after Skip, MaxFiles 1: %v", err)
	}
}
