package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle is how long the watcher waits after an event for more before
// it syncs: an editor's save is often several events.
const settle = 50 * time.Millisecond

// Watch keeps the index current until ctx ends: fsnotify events on the
// workspace root and Dir (and its subdirectories) update only the files
// they name. Events are lost while nothing watches, so once its watches
// are in place Watch scans once (a Sync, cheap when nothing changed):
// a file saved after the caller's own Sync but before the watches
// existed is found by that scan, one saved later by its event. synced,
// optional, is called after each update, the first scan included
// (tests and measurements wait on it).
func (x *Index) Watch(ctx context.Context, synced func(SyncReport, error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("memory: watch: %w", err)
	}
	defer w.Close()
	if err := w.Add(x.o.Root); err != nil {
		return fmt.Errorf("memory: watch %s: %w", x.o.Root, err)
	}
	addTree := func(dir string) {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				if err := w.Add(p); err != nil {
					x.log.Warn("memory: watch", "dir", p, "err", err)
				}
			}
			return nil
		})
	}
	addTree(filepath.Join(x.o.Root, Dir))
	rep, err := x.Sync(ctx)
	if synced != nil {
		synced(rep, err)
	}
	pending := map[string]bool{}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: a scan finds what they said.
			x.log.Warn("memory: watch", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				rep, err := x.Sync(ctx)
				if synced != nil {
					synced(rep, err)
				}
			}
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			rel, err := filepath.Rel(x.o.Root, ev.Name)
			if err != nil {
				continue
			}
			rel = filepath.ToSlash(rel)
			if ev.Has(fsnotify.Create) && (rel == Dir || strings.HasPrefix(rel, Dir+"/")) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					// A new directory (or one renamed in): watch it and
					// take in what it already holds.
					addTree(ev.Name)
					rep, err := x.Sync(ctx)
					if synced != nil {
						synced(rep, err)
					}
					continue
				}
			}
			if ev.Has(fsnotify.Remove|fsnotify.Rename) && (rel == Dir || strings.HasPrefix(rel, Dir+"/")) && !IsMemoryPath(rel) {
				// A directory went: the files under it with it.
				rep, err := x.Sync(ctx)
				if synced != nil {
					synced(rep, err)
				}
				continue
			}
			if IsMemoryPath(rel) {
				pending[rel] = true
				if timer == nil {
					timer = time.After(settle)
				}
			}
		case <-timer:
			timer = nil
			rels := make([]string, 0, len(pending))
			for r := range pending {
				rels = append(rels, r)
			}
			clear(pending)
			rep, err := x.SyncPaths(ctx, rels)
			if err != nil {
				x.log.Warn("memory: update the index", "err", err)
			}
			if synced != nil {
				synced(rep, err)
			}
		}
	}
}
