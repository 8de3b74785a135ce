package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestThrowawayChangeSet: a throw-away change set of the native runtime
// goes to memory when TMPDIR is unset or empty and /dev/shm is usable;
// a TMPDIR, or another runtime, keeps it on disk in the temporary
// directory.
func TestThrowawayChangeSet(t *testing.T) {
	tmp := t.TempDir()
	mem := memScratchUsable()
	cases := []struct {
		name, runtime string
		env           []string
		inMemory      bool
		under         string
	}{
		{"no TMPDIR", "native", []string{"PATH=/usr/bin"}, mem, ""},
		{"empty TMPDIR", "native", []string{"TMPDIR="}, mem, ""},
		{"TMPDIR", "native", []string{"TMPDIR=" + tmp}, false, tmp},
		{"docker", "docker", []string{"TMPDIR="}, false, os.TempDir()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &App{Environ: c.env}
			dir, inMemory, err := a.throwawayChangeSet(c.runtime)
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if inMemory != c.inMemory {
				t.Errorf("in memory %v, want %v (dir %s)", inMemory, c.inMemory, dir)
			}
			under := c.under
			if under == "" {
				under = os.TempDir()
				if mem {
					under = memScratch
				}
			}
			if filepath.Dir(dir) != under || !strings.HasPrefix(filepath.Base(dir), "fluffy-changeset-") {
				t.Errorf("dir %s, want a fluffy-changeset-* in %s", dir, under)
			}
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("dir %s: %v, mode %v: want private to this user", dir, err, st.Mode())
			}
		})
	}
}
