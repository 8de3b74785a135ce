package memory

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchUpdatesChangedFiles: a save, a new directory's file, a rename
// and a delete each reach the index through the watcher alone.
func TestWatchUpdatesChangedFiles(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nalpha\n")
	write(t, root, "memory/2026-01-01.md", "# Day\n\nbravo\n")
	x := open(t, root, nil)
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	synced := startWatch(t, x)
	found := func(word, path string) bool {
		res, err := x.Search(t.Context(), Query{Text: word, Mode: FullText})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Hits {
			if h.Path == path {
				return true
			}
		}
		return false
	}
	<-synced // the first scan: the watches are in place
	// wait until cond holds after the watcher's syncs; each act happens
	// once, so an event the watcher missed fails the test.
	wait := func(what string, act func(), cond func() bool) {
		t.Helper()
		act()
		for !cond() {
			select {
			case <-synced:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: not seen by the index", what)
			}
		}
	}
	wait("a save", func() { write(t, root, "MEMORY.md", "# Core\n\ncharlie\n") }, func() bool { return found("charlie", "MEMORY.md") && !found("alpha", "MEMORY.md") })
	wait("a new directory", func() { write(t, root, "memory/trips/rome.md", "# Rome\n\ndelta\n") }, func() bool { return found("delta", "memory/trips/rome.md") })
	wait("a rename", func() {
		os.Rename(filepath.Join(root, "memory/2026-01-01.md"), filepath.Join(root, "memory/2026-01-02.md"))
	}, func() bool { return found("bravo", "memory/2026-01-02.md") && !found("bravo", "memory/2026-01-01.md") })
	wait("a delete", func() { os.Remove(filepath.Join(root, "memory/trips/rome.md")) }, func() bool { return !found("delta", "memory/trips/rome.md") })
}

// TestWatchMissesNothingBeforeItsWatches: a file saved after the caller's
// Sync but before Watch has its watches in place (no event will ever
// name it) is found by the watcher's own first scan.
func TestWatchMissesNothingBeforeItsWatches(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nalpha\n")
	x := open(t, root, nil)
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	write(t, root, "memory/2026-01-03.md", "# Day\n\nechoword\n")
	synced := startWatch(t, x)
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher reported no update: the file saved before its watches was missed")
	}
	res, err := x.Search(t.Context(), Query{Text: "echoword", Mode: FullText})
	if err != nil || len(res.Hits) == 0 || res.Hits[0].Path != "memory/2026-01-03.md" {
		t.Fatalf("the file saved before the watches is not indexed: %+v %v", res, err)
	}
}

// startWatch runs x.Watch until the test ends and returns its updates.
func startWatch(t *testing.T, x *Index) <-chan SyncReport {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	synced := make(chan SyncReport, 16)
	done := make(chan error, 1)
	go func() {
		done <- x.Watch(ctx, func(r SyncReport, err error) {
			if err != nil {
				t.Error(err)
			}
			synced <- r
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return synced
}

// TestWatchFollowsSources: a source folder's files reach the index
// through the watcher alone, as memory files do: a save, a new
// folder's file, a rename and a delete; its hidden folders stay out.
func TestWatchFollowsSources(t *testing.T) {
	root, docs := t.TempDir(), t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nalpha\n")
	write(t, docs, "deploy.md", "# Deploy\n\nbravo\n")
	x, err := Open(t.Context(), Options{Root: root, DB: filepath.Join(t.TempDir(), "index.db"), Sources: []Source{{Name: "docs", Dir: docs}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	synced := startWatch(t, x)
	found := func(word, path string) bool {
		res, err := x.Search(t.Context(), Query{Text: word, Mode: FullText})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Hits {
			if h.Path == path {
				return true
			}
		}
		return false
	}
	<-synced
	wait := func(what string, act func(), cond func() bool) {
		t.Helper()
		act()
		for !cond() {
			select {
			case <-synced:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: not seen by the index", what)
			}
		}
	}
	wait("a save", func() { write(t, docs, "deploy.md", "# Deploy\n\ncharlie\n") }, func() bool {
		return found("charlie", "sources/docs/deploy.md") && !found("bravo", "sources/docs/deploy.md")
	})
	wait("a new folder", func() { write(t, docs, "api/errors.md", "# Errors\n\ndelta\n") }, func() bool { return found("delta", "sources/docs/api/errors.md") })
	wait("a rename", func() {
		if err := os.Rename(filepath.Join(docs, "deploy.md"), filepath.Join(docs, "release.md")); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return found("charlie", "sources/docs/release.md") && !found("charlie", "sources/docs/deploy.md")
	})
	wait("a delete", func() { os.Remove(filepath.Join(docs, "api/errors.md")) }, func() bool { return !found("delta", "sources/docs/api/errors.md") })
	// A hidden folder is not watched: a file there and then a file that
	// is seen; once the second is found, the first is still not.
	wait("a hidden folder", func() {
		write(t, docs, ".git/x.md", "# Hidden\n\nechoword\n")
		write(t, docs, "seen.md", "# Seen\n\nfoxtrot\n")
	}, func() bool { return found("foxtrot", "sources/docs/seen.md") })
	if found("echoword", "sources/docs/.git/x.md") {
		t.Error("a file in a source's hidden folder was indexed")
	}
}
