package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestOpenHoldsTheIndex: one writer at a time. A second Open of the
// same index is refused naming the holder; a reader opened beside it
// sees the holder's writes and cannot write; once the holder closes,
// Open succeeds.
func TestOpenHoldsTheIndex(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nalpha\n")
	db := filepath.Join(t.TempDir(), "index.db")
	x, err := Open(t.Context(), Options{Root: root, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), Options{Root: root, DB: db})
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) || he.PID != os.Getpid() {
		t.Fatalf("second Open: %v, want a HeldError naming pid %d", err, os.Getpid())
	}
	if want := fmt.Sprintf("held by process %d (", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not name the holder and its command (%q)", err, want)
	}
	r, err := OpenReader(t.Context(), Options{Root: root, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	write(t, root, "MEMORY.md", "# Core\n\nbravo\n")
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := r.Search(t.Context(), Query{Text: "bravo", Mode: FullText})
	if err != nil || len(res.Hits) != 1 {
		t.Fatalf("the reader does not see the holder's update: %+v %v", res, err)
	}
	for name, w := range map[string]func() error{
		"Sync":      func() error { _, err := r.Sync(t.Context()); return err },
		"SyncPaths": func() error { _, err := r.SyncPaths(t.Context(), []string{"MEMORY.md"}); return err },
		"Rebuild":   func() error { _, err := r.Rebuild(t.Context()); return err },
		"Watch":     func() error { return r.Watch(t.Context(), nil) },
	} {
		if err := w(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("reader's %s: %v, want ErrReadOnly", name, err)
		}
	}
	x.Close()
	y, err := Open(t.Context(), Options{Root: root, DB: db})
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	y.Close()
}

// TestRebuildStartsAfresh: Rebuild indexes every file again and the
// local model learns from scratch, where a Sync finds nothing changed.
func TestRebuildStartsAfresh(t *testing.T) {
	root, docs := t.TempDir(), t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nalpha\n")
	write(t, root, "memory/2026-01-01.md", "# Day\n\nbravo\n")
	write(t, docs, "a.md", "# A\n\ncharlie\n")
	x, err := Open(t.Context(), Options{Root: root, DB: filepath.Join(t.TempDir(), "index.db"), Sources: []Source{{Name: "docs", Dir: docs}}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rep, err := x.Sync(t.Context()); err != nil || rep.Indexed != 0 || rep.Unchanged != 3 {
		t.Fatalf("second Sync: %+v %v", rep, err)
	}
	rep, err := x.Rebuild(t.Context())
	if err != nil || rep.Indexed != 3 || rep.Unchanged != 0 {
		t.Fatalf("Rebuild: %+v %v, want 3 files indexed again", rep, err)
	}
	res, err := x.Search(t.Context(), Query{Text: "charlie", Mode: FullText})
	if err != nil || len(res.Hits) != 1 || res.Hits[0].Path != "sources/docs/a.md" {
		t.Fatalf("after Rebuild: %+v %v", res, err)
	}
}
