package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEnsure(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	d, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	// A pre-existing, too-open subdirectory is tightened.
	if err := os.MkdirAll(d.Path(Keys), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Path(Keys), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"", Keys, Changesets, Logs, Backups} {
		fi, err := os.Stat(d.Path(sub))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want dir 0700", sub, fi.Mode())
		}
	}
	if err := d.Ensure(); err != nil {
		t.Errorf("Ensure is not idempotent: %v", err)
	}
}

func TestErrors(t *testing.T) {
	if _, err := New("relative"); err == nil {
		t.Error("relative root accepted")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Keys), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d, _ := New(dir)
	if err := d.Ensure(); err == nil {
		t.Error("a file where keys/ should be was accepted")
	}
}
