package changeset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A conflict shows the three versions: the base copy kept at the
// kernel's first write, the change set's, the current real file.
func TestConflictThreeVersions(t *testing.T) {
	requireRoot(t)
	cs := begin(t, tree{"a.txt": "file 0644 one\ntwo\nthree\n", "b.txt": "file 0644 bee\n"})
	ws := cs.Workspace()
	must(t, cs.WriteFile("a.txt", []byte("one\nTWO\nthree\n"), 0))
	// A sandbox writes b.txt straight into the upper (no kernel hook);
	// KeepBases copies its base while the real file is still the base.
	must(t, os.WriteFile(filepath.Join(cs.UpperDir(), "b.txt"), []byte("BEE\n"), 0o644))
	if n, err := cs.KeepBases(t.Context()); err != nil || n != 2 {
		t.Fatalf("KeepBases = %d, %v; want 2", n, err)
	}
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\ntwo\nthree\nfour\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "b.txt"), []byte("bee!\n"), 0o644))
	_, err := cs.Apply(t.Context(), "a.txt")
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 {
		t.Fatalf("Apply = %v", err)
	}
	got := cs.Explain(ce.Conflicts[0])
	for _, want := range []string{
		"conflict: a.txt: content changed",
		"base        sha256 ", "content kept",
		"what changed in the workspace since the change set began (base → current):\n--- base/a.txt\n+++ current/a.txt\n@@ -1,3 +1,4 @@\n one\n two\n three\n+four\n",
		"what the change set does (base → change set):\n--- base/a.txt\n+++ changeset/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
	if v, err := cs.Versions("b.txt"); err != nil || string(v.Base) != "bee\n" || string(v.Changed) != "BEE\n" || string(v.Current) != "bee!\n" {
		t.Errorf("Versions(b.txt) = %+v, %v", v, err)
	}
}

// When the real file changed before any copy was kept, the conflict says
// so and shows the change set against the current file.
func TestConflictBaseNotKept(t *testing.T) {
	requireRoot(t)
	cs := begin(t, tree{"a.txt": "file 0644 one\n"})
	must(t, os.WriteFile(filepath.Join(cs.UpperDir(), "a.txt"), []byte("mine\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(cs.Workspace(), "a.txt"), []byte("theirs\n"), 0o644))
	if n, _ := cs.KeepBases(t.Context()); n != 0 {
		t.Fatalf("kept a base copy of a changed file")
	}
	_, err := cs.Apply(t.Context())
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatal(err)
	}
	got := cs.Explain(ce.Conflicts[0])
	for _, want := range []string{"content not kept", "(current → change set):\n--- current/a.txt\n+++ changeset/a.txt\n@@ -1 +1 @@\n-theirs\n+mine\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
}

// Apply and Discard exclude each other across processes (flock).
func TestApplyLocked(t *testing.T) {
	requireRoot(t)
	cs := begin(t, tree{"a.txt": "file 0644 one\n"})
	must(t, cs.WriteFile("a.txt", []byte("two\n"), 0))
	unlock, err := cs.lock(t.Context())
	must(t, err)
	if _, err := cs.Apply(t.Context()); !errors.Is(err, ErrLocked) {
		t.Errorf("Apply while locked = %v", err)
	}
	if err := cs.Discard(t.Context()); !errors.Is(err, ErrLocked) {
		t.Errorf("Discard while locked = %v", err)
	}
	unlock()
	if _, err := cs.Apply(t.Context()); err != nil {
		t.Fatal(err)
	}
}
