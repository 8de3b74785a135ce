package tool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

func TestResolve(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{ws + "/src/pkg", outside + "/deep"} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(ws+"/src/main.go", nil, 0o644))
	must(t, os.WriteFile(outside+"/secret", nil, 0o644))
	links := map[string]string{
		ws + "/esc":           outside,              // directory symlink out
		ws + "/esc-rel":       "../outside/secret",  // relative, out
		ws + "/inner":         "src/pkg",            // stays inside
		ws + "/src/up":        "..",                 // back to the root
		ws + "/loop1":         "loop2",              // a loop
		ws + "/loop2":         "loop1",              //
		ws + "/self":          "self",               // a self-loop
		ws + "/dangling-in":   "src/not-yet",        // target does not exist, inside
		ws + "/dangling-out":  "/nonexistent/place", // target does not exist, outside
		ws + "/abs-in":        ws + "/src",          // absolute, inside
		ws + "/src/pkg/climb": "../../../outside",   // climbs out in steps
		outside + "/back":     ws + "/src",          // outside pointing in
	}
	for l, target := range links {
		must(t, os.Symlink(target, l))
	}
	// The workspace itself reached through a symlink is canonicalized.
	must(t, os.Symlink(ws, base+"/ws-link"))
	r, err := NewResolver(ResolverOptions{Workspace: base + "/ws-link"})
	must(t, err)
	if r.Workspace() != ws {
		t.Fatalf("workspace = %s, want %s", r.Workspace(), ws)
	}
	cases := []struct {
		raw    string
		abs    string
		inside bool
	}{
		{"src/main.go", ws + "/src/main.go", true},
		{"./src//pkg/", ws + "/src/pkg", true},
		{".", ws, true},
		{"new/file.txt", ws + "/new/file.txt", true},
		{"../outside/secret", outside + "/secret", false},
		{"src/../../outside", outside, false},
		{"new/../../outside", outside, false},
		{"../../../../../../etc/passwd", "/etc/passwd", false},
		{"/etc/passwd", "/etc/passwd", false},
		{ws + "/src", ws + "/src", true},
		{ws + "-evil/x", ws + "-evil/x", false}, // a sibling sharing the prefix
		{"esc/secret", outside + "/secret", false},
		{"esc-rel", outside + "/secret", false},
		{"esc/../ws/src", ws + "/src", true}, // .. climbs from the link's target
		{"inner/x.go", ws + "/src/pkg/x.go", true},
		{"src/up/src/main.go", ws + "/src/main.go", true},
		{"src/up/..", base, false},
		{"dangling-in", ws + "/src/not-yet", true},
		{"dangling-out", "/nonexistent/place", false},
		{"abs-in/main.go", ws + "/src/main.go", true},
		{"src/pkg/climb/secret", outside + "/secret", false},
		{outside + "/back/main.go", ws + "/src/main.go", true},
		{"src/main.go/x", ws + "/src/main.go/x", true},
	}
	for _, c := range cases {
		p, err := r.Resolve(c.raw)
		if err != nil {
			t.Errorf("Resolve(%q): %v", c.raw, err)
			continue
		}
		want := operation.Path{Abs: c.abs, Raw: c.raw, InWorkspace: c.inside}
		if p != want {
			t.Errorf("Resolve(%q) = %+v, want %+v", c.raw, p, want)
		}
	}
	for _, raw := range []string{"loop1", "self/x", "loop2/a/b"} {
		if _, err := r.Resolve(raw); !errors.Is(err, ErrPathLoop) {
			t.Errorf("Resolve(%q) = %v, want ErrPathLoop", raw, err)
		}
	}
	for _, raw := range []string{"", "a\x00b", strings.Repeat("a/", 2100), strings.Repeat("x", 256), "ok/" + strings.Repeat("y", 300) + "/z"} {
		if _, err := r.Resolve(raw); !errors.Is(err, ErrPathInvalid) {
			t.Errorf("Resolve(%.40q…) = %v, want ErrPathInvalid", raw, err)
		}
	}
	// A long path within the limits resolves.
	long := strings.Repeat("abcdefgh/", 400)
	if p, err := r.Resolve(long); err != nil || !p.InWorkspace {
		t.Errorf("Resolve(long) = %+v, %v", p, err)
	}
	// Relative paths start at Cwd.
	rc, err := NewResolver(ResolverOptions{Workspace: ws, Cwd: "src"})
	must(t, err)
	if p, _ := rc.Resolve("main.go"); p.Abs != ws+"/src/main.go" {
		t.Errorf("with cwd: %+v", p)
	}
	if rel, ok := r.Rel(operation.Path{Abs: ws + "/src/main.go", InWorkspace: true}); !ok || rel != "src/main.go" {
		t.Errorf("Rel = %q, %v", rel, ok)
	}
}

func FuzzResolve(f *testing.F) {
	ws := f.TempDir()
	if err := os.MkdirAll(ws+"/a/b", 0o755); err != nil {
		f.Fatal(err)
	}
	_ = os.Symlink("..", ws+"/a/up")
	_ = os.Symlink("/", ws+"/root")
	_ = os.Symlink("loop", ws+"/loop")
	for _, s := range []string{"a/b", "../x", "a/up/up/etc", "root/etc/passwd", "loop", "/", "a/./b//c/..", ""} {
		f.Add(s)
	}
	r, err := NewResolver(ResolverOptions{Workspace: ws})
	if err != nil {
		f.Fatal(err)
	}
	ws = r.Workspace()
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := r.Resolve(raw)
		if err != nil {
			if !errors.Is(err, ErrPathInvalid) && !errors.Is(err, ErrPathLoop) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if !filepath.IsAbs(p.Abs) || filepath.Clean(p.Abs) != p.Abs {
			t.Fatalf("Resolve(%q) = %q: not absolute and clean", raw, p.Abs)
		}
		inside := p.Abs == ws || strings.HasPrefix(p.Abs, ws+"/")
		if inside != p.InWorkspace {
			t.Fatalf("Resolve(%q) = %+v: inside flag wrong", raw, p)
		}
		// Whatever exists of the result has no symlink left in it.
		if real, err := filepath.EvalSymlinks(p.Abs); err == nil && real != p.Abs {
			t.Fatalf("Resolve(%q) = %q, but it resolves to %q", raw, p.Abs, real)
		}
	})
}

// deniedFS fails every Lstat below /denied with EACCES.
type deniedFS struct{ osLinks }

func (d deniedFS) Lstat(name string) (fs.FileInfo, error) {
	if strings.HasPrefix(name, "/denied") {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: syscall.EACCES}
	}
	return d.osLinks.Lstat(name)
}

func TestResolveFailsClosed(t *testing.T) {
	r, err := NewResolver(ResolverOptions{Workspace: t.TempDir(), FS: deniedFS{}})
	must(t, err)
	if _, err := r.Resolve("/denied/x/../../etc"); !errors.Is(err, ErrPathInvalid) {
		t.Errorf("Resolve through an unreadable directory = %v, want ErrPathInvalid", err)
	}
}
