package memory

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSourcesFrom(t *testing.T) {
	got := SourcesFrom([]string{"~/repo/docs", "/srv/other/docs", "relative/docs", "", "/x/Read Me!"}, "/home/sam")
	want := []Source{{"docs", "/home/sam/repo/docs"}, {"docs-2", "/srv/other/docs"}, {"Read-Me", "/x/Read Me!"}}
	if !slices.Equal(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
}

// TestSourcesAreIndexedByPath: a source folder's Markdown is indexed as
// sources/NAME/..., searched by path and read by GetFrom; a symbolic
// link out of it and its hidden folders are not indexed; a source no
// longer configured leaves the index at the next sync.
func TestSourcesAreIndexedByPath(t *testing.T) {
	root, docs, outside := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, root, "MEMORY.md", "# Memory\n\nThe person writes Go.\n")
	write(t, docs, "deploy.md", "# Deploying\n\nRun the release workflow; the canary takes ten minutes.\n")
	write(t, docs, "api/errors.md", "# Errors\n\nEvery handler wraps its error with the request id.\n")
	write(t, docs, ".git/notes.md", "# Hidden\n\ncanary secret\n")
	write(t, docs, "notes.txt", "canary as text\n")
	write(t, outside, "leak.md", "# Leak\n\nthe canary from outside\n")
	if err := os.Symlink(filepath.Join(outside, "leak.md"), filepath.Join(docs, "leak.md")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "index.db")
	srcs := []Source{{Name: "docs", Dir: docs}}
	x, err := Open(t.Context(), Options{Root: root, DB: db, Sources: srcs})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := x.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Indexed != 3 {
		t.Errorf("indexed %d files, want 3 (MEMORY.md and two docs)", rep.Indexed)
	}
	res, err := x.Search(t.Context(), Query{Text: "canary", Mode: FullText})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 1 || res.Hits[0].Path != "sources/docs/deploy.md" {
		t.Fatalf("hits %+v, want sources/docs/deploy.md alone", res.Hits)
	}
	res, _ = x.Search(t.Context(), Query{Text: "error request", Mode: FullText, Path: "sources/docs/api"})
	if len(res.Hits) != 1 || res.Hits[0].Path != "sources/docs/api/errors.md" {
		t.Fatalf("path filter: %+v", res.Hits)
	}
	s, err := GetFrom(root, srcs, "sources/docs/deploy.md", "Deploying")
	if err != nil || s.Line != 1 {
		t.Fatalf("get: %+v %v", s, err)
	}
	for _, p := range []string{"sources/docs/leak.md", "sources/docs/../../etc/passwd", "sources/other/deploy.md", "sources/docs/notes.txt"} {
		if _, err := GetFrom(root, srcs, p, ""); err == nil {
			t.Errorf("%s was read", p)
		}
	}
	x.Close()
	x, err = Open(t.Context(), Options{Root: root, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if rep, err := x.Sync(t.Context()); err != nil || rep.Removed != 2 {
		t.Fatalf("a source no longer configured: %+v %v", rep, err)
	}
	if _, err := GetFrom(root, nil, "sources/docs/deploy.md", ""); !errors.Is(err, ErrOutside) {
		t.Errorf("get without the source: %v", err)
	}
}
