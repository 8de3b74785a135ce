package tool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// TestResolveThroughChangeSet resolves paths through a session's merged
// view: a symlink that exists only in the change set is followed, one the
// session deleted is not.
func TestResolveThroughChangeSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts need root")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(ws+"/src", 0o755))
	must(t, os.Symlink("/etc", ws+"/etc-link"))
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(base, "cs"))
	must(t, err)
	must(t, cs.Remove("etc-link", false))
	must(t, os.Symlink("../../../../../../tmp", filepath.Join(cs.UpperDir(), "sneaky")))
	r, err := NewResolver(ResolverOptions{Workspace: ws, FS: cs.Links()})
	must(t, err)
	for raw, want := range map[string]struct {
		abs    string
		inside bool
	}{
		"sneaky/x":        {"/tmp/x", false},               // only in the change set, followed
		"etc-link/passwd": {ws + "/etc-link/passwd", true}, // deleted in the change set
		"src/a.go":        {ws + "/src/a.go", true},
	} {
		p, err := r.Resolve(raw)
		if err != nil || p.Abs != want.abs || p.InWorkspace != want.inside {
			t.Errorf("Resolve(%q) = %+v, %v; want %s inside=%v", raw, p, err, want.abs, want.inside)
		}
	}
}

// plainLinks hides the change set's LstatStep, so the Resolver takes the
// Lstat path (a full lookup from the workspace root per component).
type plainLinks struct{ l changeset.Links }

func (p plainLinks) Lstat(name string) (fs.FileInfo, error) { return p.l.Lstat(name) }
func (p plainLinks) Readlink(name string) (string, error)   { return p.l.Readlink(name) }

// TestResolveStepMatchesLstat: resolving with the one-walk LstatStep
// gives exactly what the per-prefix Lstat walk gives, for escapes through
// symlinks in either layer, ".." after a symlink, absolute targets that
// come back into the workspace, whiteouts, opaque directories, loops,
// files used as directories and paths that do not exist.
func TestResolveStepMatchesLstat(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts need root")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(ws+"/a/b/c", 0o755))
	must(t, os.MkdirAll(ws+"/gone/sub", 0o755))
	must(t, os.MkdirAll(ws+"/opaque/old", 0o755))
	must(t, os.WriteFile(ws+"/a/b/c/f.go", []byte("x"), 0o644))
	must(t, os.WriteFile(ws+"/file", nil, 0o644))
	must(t, os.Symlink("/etc", ws+"/etc-link"))
	must(t, os.Symlink("b/c", ws+"/a/rel-link"))
	must(t, os.Symlink("../../..", ws+"/a/b/up3"))
	must(t, os.Symlink(ws+"/a/b", ws+"/abs-in"))
	must(t, os.Symlink("loop2", ws+"/loop1"))
	must(t, os.Symlink("loop1", ws+"/loop2"))
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(base, "cs"))
	must(t, err)
	must(t, cs.Remove("gone", true))
	must(t, cs.Remove("opaque", true))
	must(t, cs.MkdirAll("opaque/new"))
	must(t, cs.MkdirAll("a/b/c/upper-only"))
	must(t, os.Symlink("../../../../../../tmp", filepath.Join(cs.UpperDir(), "sneaky")))
	must(t, os.Symlink("/", filepath.Join(cs.UpperDir(), "a", "root-link")))
	step, err := NewResolver(ResolverOptions{Workspace: ws, FS: cs.Links()})
	must(t, err)
	plain, err := NewResolver(ResolverOptions{Workspace: ws, FS: plainLinks{cs.Links()}})
	must(t, err)
	ws = step.Workspace()
	for _, raw := range []string{
		"a/b/c/f.go", "a/rel-link/f.go", "a/rel-link/../c/f.go", "a/rel-link/..", "a/b/up3/x",
		"a/b/up3/" + filepath.Base(base) + "/ws/a", "abs-in/c/f.go", "abs-in/../file", "etc-link/passwd",
		"sneaky/x", "sneaky/../etc", "a/root-link" + ws + "/a/b", "a/root-link/etc/passwd",
		"gone/sub/x", "opaque/old/x", "opaque/new/y", "a/b/c/upper-only/z", "file/below", "loop1/x",
		"none/x/y", "a/./b//c/../c/f.go", "..", "../..", "/", ws, ws + "/a/b/../b/c", "/etc/../" + ws[1:] + "/a",
		"a/b/c/f.go/", "a/b/c/", "./", "opaque/../etc-link/passwd", "opaque/new/../../sneaky/x",
		"a/b/c/upper-only/../../../../etc-link/x", "a/root-link/../" + ws[1:] + "/etc-link/y",
	} {
		got, gerr := step.Resolve(raw)
		want, werr := plain.Resolve(raw)
		if got != want || (gerr == nil) != (werr == nil) || gerr != nil && !errors.Is(gerr, ErrPathLoop) != !errors.Is(werr, ErrPathLoop) {
			t.Errorf("Resolve(%q): one walk %+v, %v; per-prefix %+v, %v", raw, got, gerr, want, werr)
		}
	}
	for raw, want := range map[string]string{"sneaky/x": "/tmp/x", "opaque/../etc-link/passwd": "/etc/passwd", "a/b/up3/x": base + "/x", "gone/sub/x": ws + "/gone/sub/x"} {
		if got, err := step.Resolve(raw); err != nil || got.Abs != want {
			t.Errorf("Resolve(%q) = %+v, %v; want %s", raw, got, err, want)
		}
	}
}

// stepLinks hides the change set's PlainPath but keeps LstatStep: the
// Resolver walks component by component, as before the shortcut.
type stepLinks struct{ plainLinks }

func (s stepLinks) LstatStep(dir string, st any, name string) (fs.FileInfo, any, error) {
	return s.l.LstatStep(dir, st, name)
}

// countLinks is the change set's view counting the shortcuts it takes.
type countLinks struct {
	changeset.Links
	plain *int
}

func (c countLinks) PlainPath(dir string, names []string) bool {
	ok := c.Links.PlainPath(dir, names)
	if ok {
		*c.plain++
	}
	return ok
}

// TestResolvePlainPathMatchesWalk: the whole-path shortcut (PlainPath:
// one openat2 when the upper layer has nothing on the way) resolves
// exactly as the component walk and the per-prefix walk, for lower-only
// paths through symlinks (relative, absolute, escaping, final), special
// files (a fifo, a 0/0 character device that overlayfs reads as a
// whiteout), files used as directories, missing entries, ".." and a
// working directory below the root; and for paths whose first component
// the session changed (whiteout, opaque directory, upper-only symlink,
// upper directory over a lower one), where it must decline.
func TestResolvePlainPathMatchesWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts need root")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(ws+"/low/d/e", 0o755))
	must(t, os.MkdirAll(ws+"/mixed/d", 0o755))
	must(t, os.MkdirAll(ws+"/gone/d", 0o755))
	must(t, os.MkdirAll(ws+"/swapped/d", 0o755))
	must(t, os.MkdirAll(ws+"/opaque/d", 0o755))
	must(t, os.WriteFile(ws+"/low/d/e/f.go", []byte("x"), 0o644))
	must(t, os.WriteFile(ws+"/mixed/d/f.go", []byte("x"), 0o644))
	must(t, os.WriteFile(ws+"/opaque/d/f.go", []byte("x"), 0o644))
	must(t, os.Symlink("d", ws+"/low/lnk"))
	must(t, os.Symlink("/etc", ws+"/low/abs"))
	must(t, os.Symlink("../../..", ws+"/low/d/up"))
	must(t, os.Symlink("e/f.go", ws+"/low/d/final"))
	must(t, os.Symlink(ws+"/low/d", ws+"/low/abs-in"))
	must(t, syscall.Mkfifo(ws+"/low/fifo", 0o644))
	must(t, syscall.Mknod(ws+"/low/wh", syscall.S_IFCHR|0o644, 0))
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(base, "cs"))
	must(t, err)
	must(t, cs.Remove("gone", true))
	must(t, cs.Remove("opaque", true))
	must(t, cs.MkdirAll("opaque/d"))
	must(t, cs.WriteFile("mixed/d/g.go", []byte("y"), 0o644))
	must(t, os.Symlink("low/d", filepath.Join(cs.UpperDir(), "sneaky")))
	// The session replaced a plain lower directory by a symlink out.
	must(t, cs.Remove("swapped", true))
	must(t, os.Remove(filepath.Join(cs.UpperDir(), "swapped")))
	must(t, os.Symlink("/etc", filepath.Join(cs.UpperDir(), "swapped")))
	ws, err = filepath.EvalSymlinks(ws)
	must(t, err)
	paths := []string{
		"low", "low/d/e/f.go", "low/d/e/f.go/", "low/./d//e/f.go", "low/lnk/e/f.go", "low/abs/passwd",
		"low/d/up/x", "low/d/final", "low/abs-in/e", "low/fifo", "low/wh", "low/wh/x", "low/fifo/x",
		"low/d/e/f.go/x", "low/none", "low/none/x", "low/d/../d/e", "low/d/e/../../lnk",
		"mixed/d/f.go", "mixed/d/g.go", "mixed/d", "gone/d", "gone", "opaque/d/f.go", "opaque/d",
		"sneaky/e/f.go", "sneaky", "swapped/d", "swapped/passwd", ws + "/low/d/e", ws + "/gone/d", "/etc/passwd", "/",
	}
	for _, cwd := range []string{"", "low/d", "mixed/d"} {
		n := 0
		fast, err := NewResolver(ResolverOptions{Workspace: ws, Cwd: cwd, FS: countLinks{cs.Links(), &n}})
		must(t, err)
		step, err := NewResolver(ResolverOptions{Workspace: ws, Cwd: cwd, FS: stepLinks{plainLinks{cs.Links()}}})
		must(t, err)
		plain, err := NewResolver(ResolverOptions{Workspace: ws, Cwd: cwd, FS: plainLinks{cs.Links()}})
		must(t, err)
		n = 0
		for _, raw := range append(paths, "e/f.go", "up/x", "final", "../lnk/e", "f.go", "g.go") {
			got, gerr := fast.Resolve(raw)
			mid, merr := step.Resolve(raw)
			want, werr := plain.Resolve(raw)
			if got != want || mid != want || (gerr == nil) != (werr == nil) || (merr == nil) != (werr == nil) {
				t.Errorf("cwd %q Resolve(%q): shortcut %+v, %v; step %+v, %v; per-prefix %+v, %v", cwd, raw, got, gerr, mid, merr, want, werr)
			}
		}
		if n == 0 {
			t.Errorf("cwd %q: the shortcut was never taken", cwd)
		}
	}
	// The shortcut declines wherever the session's layer is on the way
	// or the lower path is not plain.
	l := cs.Links()
	for _, p := range []string{"gone/d", "swapped/d", "opaque/d/f.go", "mixed/d/f.go", "sneaky/e", "low/lnk/e", "low/d/final", "low/fifo", "low/wh", "low/none", "low/abs"} {
		if l.PlainPath(ws, strings.Split(p, "/")) {
			t.Errorf("PlainPath(%q) = true", p)
		}
	}
	for _, p := range []string{"low", "low/d/e/f.go", "low/d/e"} {
		if !l.PlainPath(ws, strings.Split(p, "/")) {
			t.Errorf("PlainPath(%q) = false", p)
		}
	}
	if l.PlainPath(ws+"/low", []string{"..", "gone"}) || l.PlainPath(ws, []string{"low/d"}) || l.PlainPath("/etc", []string{"passwd"}) {
		t.Error("PlainPath accepted a name with a slash, \"..\" or a directory outside the workspace")
	}
}
