package tool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
