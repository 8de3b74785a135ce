package wiring

import (
	"os"
	"path/filepath"
	"testing"
)

// A session's shared folder is made on demand and removed when the
// session ends; a session name that is not one folder name gets none.
func TestSkillSharedEndsWithTheSession(t *testing.T) {
	sh := skillShared{root: filepath.Join(t.TempDir(), "skills-shared")}
	dir, err := sh.make("s0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "note"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("folder %v, %v", fi, err)
	}
	sh.EndSession("s0123456789ab")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the folder outlived its session: %v", err)
	}
	for _, bad := range []string{"", "..", "../x", "a/b", ".hidden"} {
		if _, err := sh.make(bad); err == nil {
			t.Errorf("make(%q) made a folder", bad)
		}
		sh.EndSession(bad) // removes nothing outside root
	}
	if _, err := os.Stat(filepath.Dir(sh.root)); err != nil {
		t.Fatalf("EndSession removed the cache: %v", err)
	}
}
