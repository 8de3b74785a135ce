package sandboxd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSweepStale: a server removes the files of servers that are gone
// (no lock holder) and untouched for a day; its own, a held lock's and
// recent ones stay.
func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	trio := func(name string, mtime time.Time) string {
		sock := filepath.Join(dir, name+".sock")
		for _, p := range []string{sock, sock + ".lock", sock + ".log"} {
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		return sock
	}
	ours := trio("sandbox-ours", old)
	gone := trio("sandbox-gone", old)
	recent := trio("sandbox-recent", now.Add(-time.Hour))
	held := trio("sandbox-held", old)
	f, err := os.Open(held + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "notes.lock")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(other, old, old)

	removed, err := sweepStale(ours, staleAfter, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{gone}) {
		t.Errorf("removed %q, want only %q", removed, gone)
	}
	for _, sock := range []string{ours, recent, held} {
		for _, p := range []string{sock, sock + ".lock", sock + ".log"} {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
	for _, p := range []string{gone, gone + ".lock", gone + ".log"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file not of a server was removed: %v", err)
	}
}
