package native

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveWork: a work directory goes, whether it holds exactly what a
// volatile overlay leaves (removed by name) or anything else (walked).
func TestRemoveWork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // created (parents too); a trailing / makes a directory
		fast  bool
	}{
		{"volatile leftovers", []string{"work/incompat/volatile/dirty"}, true},
		{"not volatile", []string{"work/"}, false},
		{"more than the leftovers", []string{"work/incompat/volatile/dirty", "work/x", "index/"}, false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), ".fluffy-work-1")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if f[len(f)-1] != '/' {
					if err := os.WriteFile(p, nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The kernel leaves the inner work directory with mode 0.
			if err := os.Chmod(filepath.Join(dir, "work"), 0); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if os.Getuid() == 0 {
				if fast := removeWorkFast(dir) == nil; fast != tc.fast {
					t.Errorf("removed by name: %v, want %v", fast, tc.fast)
				}
			}
			removeWork(dir)
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Fatalf("the work directory is still there: %v", err)
			}
		})
	}
}
