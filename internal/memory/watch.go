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
// workspace root, Dir and each source folder (and their subdirectories)
// update only the files they name. Events are lost while nothing watches, so once its watches
// are in place Watch scans once (a Sync, cheap when nothing changed):
// a file saved after the caller's own Sync but before the watches
// existed is found by that scan, one saved later by its event. synced,
// optional, is called after each update, the first scan included
// (tests and measurements wait on it).
func (x *Index) Watch(ctx context.Context, synced func(SyncReport, error)) error {
	if x.readOnly {
		return ErrReadOnly
	}
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
				if strings.HasPrefix(d.Name(), ".") && x.sourceOf(p) != "" && !x.isSourceRoot(p) {
					return fs.SkipDir // a source's .git and the like, as Sync
				}
				if err := w.Add(p); err != nil {
					x.log.Warn("memory: watch", "dir", p, "err", err)
				}
			}
			return nil
		})
	}
	addTree(filepath.Join(x.o.Root, Dir))
	for _, s := range x.o.Sources {
		addTree(s.Dir)
	}
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
			rel, tree, ok := x.watchedPath(ev.Name)
			if !ok {
				continue
			}
			if ev.Has(fsnotify.Create) && tree {
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
			if ev.Has(fsnotify.Remove|fsnotify.Rename) && tree && !IsMemoryPath(rel) && !IsSourcePath(rel) {
				// A directory went: the files under it with it.
				rep, err := x.Sync(ctx)
				if synced != nil {
					synced(rep, err)
				}
				continue
			}
			if IsMemoryPath(rel) || IsSourcePath(rel) {
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

// watchedPath is the index's path for a watched file or folder name:
// rel is a memory path or sources/NAME/...; tree reports whether name is
// in a watched tree (Dir or a source folder, not the workspace root's
// other files), where a new folder is watched and a folder gone is
// looked for. ok is false for a name outside them all.
func (x *Index) watchedPath(name string) (rel string, tree, ok bool) {
	if s := x.sourceOf(name); s != "" {
		for _, src := range x.o.Sources {
			if src.Name != s {
				continue
			}
			in, err := filepath.Rel(src.Dir, name)
			if err != nil {
				return "", false, false
			}
			if in == "." {
				return SourcesDir + "/" + s, true, true
			}
			return SourcesDir + "/" + s + "/" + filepath.ToSlash(in), true, true
		}
	}
	r, err := filepath.Rel(x.o.Root, name)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", false, false
	}
	rel = filepath.ToSlash(r)
	return rel, rel == Dir || strings.HasPrefix(rel, Dir+"/"), true
}

// sourceOf is the name of the source folder name is in (or is), or "".
func (x *Index) sourceOf(name string) string {
	for _, s := range x.o.Sources {
		if name == s.Dir || strings.HasPrefix(name, s.Dir+string(filepath.Separator)) {
			return s.Name
		}
	}
	return ""
}

// isSourceRoot reports whether dir is a source folder itself.
func (x *Index) isSourceRoot(dir string) bool {
	for _, s := range x.o.Sources {
		if dir == s.Dir {
			return true
		}
	}
	return false
}
