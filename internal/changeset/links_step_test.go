package changeset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLstatStepMatchesLstat: walking component by component with
// LstatStep answers exactly as Lstat of every prefix, through both layers.
func TestLstatStepMatchesLstat(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(ws+"/a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/a/b/f.go", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b", ws+"/a/lnk"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/file", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := Begin(t.Context(), ws, filepath.Join(base, "cs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.MkdirAll("a/new/deep"); err != nil {
		t.Fatal(err)
	}
	if err := cs.WriteFile("a/b/g.go", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(cs.UpperDir(), "a", "up-link")); err != nil {
		t.Fatal(err)
	}
	ws = cs.workspace
	l := cs.Links()
	for _, rel := range []string{
		"a/b/f.go", "a/b/g.go", "a/b/none", "a/lnk/f.go", "a/new/deep/x", "a/up-link/passwd",
		"file/below", "none/x/y", "a/b/f.go/x",
	} {
		dir, state := ws, any(nil)
		for _, c := range strings.Split(rel, "/") {
			full := filepath.Join(dir, c)
			want, werr := l.Lstat(full)
			got, st, gerr := l.LstatStep(dir, state, c)
			if (werr == nil) != (gerr == nil) || werr != nil && !(errorsIsNotExist(werr) && errorsIsNotExist(gerr)) {
				t.Fatalf("%s: LstatStep err %v, Lstat err %v", full, gerr, werr)
			}
			if werr != nil {
				break
			}
			if got.Mode() != want.Mode() || got.Size() != want.Size() || got.Sys().(Entry) != want.Sys().(Entry) {
				t.Fatalf("%s: LstatStep %+v, Lstat %+v", full, got.Sys(), want.Sys())
			}
			dir, state = full, st
		}
	}
}

func errorsIsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
