package tool

import (
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
