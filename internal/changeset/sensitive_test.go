package changeset

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSensitive(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{".git/hooks/pre-commit", true},
		{".git/hooks", true},
		{".git/config", true},
		{".git/info/attributes", true},
		{".git/modules/sub/config", true},
		{"vendor/lib/.git/hooks/post-checkout", true},
		{".fluffy/policy.yaml", true},
		{"sub/.fluffy/config.yaml", true},
		{".git", false},
		{".git/objects/ab/cdef", false},
		{".git/refs/heads/main", false},
		{".git/index", false},
		{".git/HEAD", false},
		{"src/hooks/config", false},
		{"git/config", false},
		{".gitignore", false},
		{"a.fluffy", false},
	} {
		if got := Sensitive(c.path); got != c.want {
			t.Errorf("Sensitive(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}

// A hook any sandboxed command (a test the model wrote, say) put into the
// change set does not reach the real .git with the rest: applying all, or
// its directory, refuses and writes nothing; naming it applies it.
func TestApplySensitive(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	cs := begin(t, baseTree)
	ws := cs.Workspace()
	must(t, os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	must(t, cs.WriteFile(".git/hooks/post-checkout", []byte("#!/bin/sh\ntouch /tmp/pwned\n"), 0o755))
	must(t, cs.WriteFile(".fluffy/policy.yaml", []byte("rules: []\n"), 0))
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	before := snap(t, ws)
	for _, sel := range [][]string{nil, {".git"}, {".git/hooks"}, {".fluffy"}, {"a.txt", ".git/hooks"}} {
		_, err := cs.Apply(ctx, sel...)
		var se *SensitiveError
		if !errors.As(err, &se) || !errors.Is(err, ErrSensitive) {
			t.Fatalf("Apply(%q) = %v, want *SensitiveError", sel, err)
		}
		if len(se.Paths) == 0 || slices.Contains(se.Paths, "a.txt") {
			t.Errorf("Apply(%q) refused %q", sel, se.Paths)
		}
		if after := snap(t, ws); !maps.Equal(before, after) {
			t.Fatalf("Apply(%q) changed the tree although it refused", sel)
		}
	}
	// The ordinary file alone, then the hook named exactly.
	if _, err := cs.Apply(ctx, "a.txt"); err != nil {
		t.Fatalf("Apply(a.txt): %v", err)
	}
	applied, err := cs.Apply(ctx, ".git/hooks/post-checkout")
	if err != nil || len(applied) != 1 {
		t.Fatalf("Apply of the named hook: %v %v", applied, err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/post-checkout")); err != nil {
		t.Errorf("the named hook was not applied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".fluffy/policy.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".fluffy/policy.yaml reached the tree unnamed: %v", err)
	}
}
