package builtin

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/gitview"
)

// viewWalker walks the merged view of a change set for the search tools,
// in name order, skipping .git and (unless noIgnore) what .gitignore
// files, .git/info/exclude and their negations exclude.
//
// It reads a directory through the change set (whiteouts, opaque
// directories) only where the upper layer has it; a directory only the
// lower layer has (most of a workspace: the session changed nothing below
// it) is read straight from the workspace with one getdents per
// directory. Every open is openat2 beneath a layer's root with
// RESOLVE_NO_SYMLINKS: no symlink is followed and nothing outside the
// layer is reached.
type viewWalker struct {
	cs       *changeset.ChangeSet
	noIgnore bool
	links    bool // also visit symlinks (never followed)
	lower    int  // O_PATH descriptor of the workspace root
	upper    int  // O_PATH descriptor of the upper root
}

// fileRef is a regular file of the view and the layer holding it.
type fileRef struct {
	rel   string
	upper bool
	link  bool // a symlink (visited only when the walker's links is set)
}

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

func newViewWalker(cs *changeset.ChangeSet, noIgnore bool) (*viewWalker, error) {
	lo, err := unix.Open(cs.Workspace(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: cs.Workspace(), Err: err}
	}
	up, err := unix.Open(cs.UpperDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(lo)
		return nil, &fs.PathError{Op: "open", Path: cs.UpperDir(), Err: err}
	}
	return &viewWalker{cs: cs, noIgnore: noIgnore, lower: lo, upper: up}, nil
}

func (w *viewWalker) Close() {
	unix.Close(w.lower)
	unix.Close(w.upper)
}

// open opens a file of the view read-only.
func (w *viewWalker) open(f fileRef) (*os.File, error) {
	root := w.lower
	if f.upper {
		root = w.upper
	}
	fd, err := unix.Openat2(root, f.rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK, Resolve: beneath})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: f.rel, Err: err}
	}
	// Regular files only: a FIFO opened O_NONBLOCK would make a read
	// wait in the poller for a writer's data.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = &changeset.NotRegularError{Path: f.rel, Type: changeset.FileType(st.Mode)}
		}
		return nil, &fs.PathError{Op: "open", Path: f.rel, Err: err}
	}
	return os.NewFile(uintptr(fd), f.rel), nil
}

// maxIgnoreFile caps a .gitignore file read.
const maxIgnoreFile = 1 << 20

// readSmall reads a file of the view if it exists (nil otherwise).
func (w *viewWalker) readSmall(f fileRef) []byte {
	fh, err := w.open(f)
	if err != nil {
		return nil
	}
	defer fh.Close()
	b, _ := io.ReadAll(io.LimitReader(fh, maxIgnoreFile))
	return b
}

// walk visits the files at or below rel (a file or a directory); fn may
// return errEnough or another error to stop.
func (w *viewWalker) walk(ctx context.Context, rel string, fn func(fileRef) error) error {
	e, err := w.cs.Stat(rel)
	if err != nil {
		return err
	}
	ig := &ignores{}
	if !w.noIgnore {
		// Patterns of the directories above rel apply below it. A
		// named path is searched even when ignored; below an ignored
		// one only the .gitignore files inside it count.
		ig = w.rootIgnores(rel)
		if rel != "." && ig.match(rel, e.Kind == changeset.KindDir) {
			ig = &ignores{}
		}
	}
	switch e.Kind {
	case changeset.KindFile:
		return fn(fileRef{rel: rel, upper: e.Layer == changeset.LayerUpper})
	case changeset.KindSymlink:
		if w.links {
			return fn(fileRef{rel: rel, upper: e.Layer == changeset.LayerUpper, link: true})
		}
	case changeset.KindDir:
		// The root always has both layers (Stat reports it as lower).
		if e.Layer == changeset.LayerLower && rel != "." {
			return w.lowerDir(ctx, rel, ig, fn)
		}
		return w.mergedDir(ctx, rel, ig, fn)
	}
	return nil
}

// rootIgnores loads .git/info/exclude and the .gitignore files of the
// directories above rel (the root's included; rel's own is read when rel
// is walked).
func (w *viewWalker) rootIgnores(rel string) *ignores {
	ig := &ignores{}
	if b := w.mergedRead(".git/info/exclude"); b != nil {
		ig = ig.with(nil, b)
	}
	dir := "."
	for {
		if b := w.mergedRead(path.Join(dir, ".gitignore")); b != nil {
			ig = ig.with(segments(dir), b)
		}
		rest := strings.TrimPrefix(rel, dir+"/")
		if dir == "." {
			rest = rel
		}
		next, more, ok := strings.Cut(rest, "/")
		if !ok || more == "" || rel == "." {
			return ig
		}
		dir = path.Join(dir, next)
	}
}

// mergedRead reads a small file through the change set's merged view.
func (w *viewWalker) mergedRead(rel string) []byte {
	e, err := w.cs.Stat(rel)
	if err != nil || e.Kind != changeset.KindFile {
		return nil
	}
	return w.readSmall(fileRef{rel: rel, upper: e.Layer == changeset.LayerUpper})
}

// mergedDir walks a directory the upper layer has, through the change
// set.
func (w *viewWalker) mergedDir(ctx context.Context, rel string, ig *ignores, fn func(fileRef) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ents, err := w.cs.ReadDir(rel)
	if err != nil {
		return err
	}
	if !w.noIgnore && rel != "." {
		for _, e := range ents {
			if path.Base(e.Path) == ".gitignore" && e.Kind == changeset.KindFile {
				ig = ig.with(segments(rel), w.readSmall(fileRef{rel: e.Path, upper: e.Layer == changeset.LayerUpper}))
			}
		}
	}
	for _, e := range ents {
		if path.Base(e.Path) == ".git" {
			continue
		}
		isDir := e.Kind == changeset.KindDir
		if !w.noIgnore && ig.match(e.Path, isDir) {
			continue
		}
		switch {
		case e.Kind == changeset.KindFile:
			if err := fn(fileRef{rel: e.Path, upper: e.Layer == changeset.LayerUpper}); err != nil {
				return err
			}
		case e.Kind == changeset.KindSymlink && w.links:
			if err := fn(fileRef{rel: e.Path, upper: e.Layer == changeset.LayerUpper, link: true}); err != nil {
				return err
			}
		case isDir && e.Layer == changeset.LayerLower:
			if err := w.lowerDir(ctx, e.Path, ig, fn); err != nil {
				return err
			}
		case isDir:
			if err := w.mergedDir(ctx, e.Path, ig, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// lowerDir walks a directory only the lower layer has: nothing below it
// is in the change set, so it is read from the workspace directly.
func (w *viewWalker) lowerDir(ctx context.Context, rel string, ig *ignores, fn func(fileRef) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fd, err := unix.Openat2(w.lower, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	d := os.NewFile(uintptr(fd), rel)
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	if !w.noIgnore && rel != "." {
		for _, e := range ents {
			if e.Name() == ".gitignore" && e.Type().IsRegular() {
				ig = ig.with(segments(rel), w.readSmall(fileRef{rel: path.Join(rel, ".gitignore")}))
			}
		}
	}
	for _, e := range ents {
		name := e.Name()
		if name == ".git" {
			continue
		}
		t := e.Type()
		p := name
		if rel != "." {
			p = rel + "/" + name
		}
		if !w.noIgnore && ig.match(p, t.IsDir()) {
			continue
		}
		switch {
		case t.IsRegular():
			if err := fn(fileRef{rel: p}); err != nil {
				return err
			}
		case t&fs.ModeSymlink != 0 && w.links:
			if err := fn(fileRef{rel: p, link: true}); err != nil {
				return err
			}
		case t.IsDir():
			if err := w.lowerDir(ctx, p, ig, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// ignores is the gitignore patterns in force in a directory, lowest
// priority first (go-git's matcher takes the last pattern that matches).
type ignores struct {
	pats []gitignore.Pattern
}

// with returns ig plus the patterns of a .gitignore (content b) of the
// directory dir.
func (ig *ignores) with(dir []string, b []byte) *ignores {
	ps := gitview.IgnorePatterns(b, dir)
	if len(ps) == 0 {
		return ig
	}
	return &ignores{pats: append(slices.Clip(ig.pats), ps...)}
}

func (ig *ignores) match(rel string, isDir bool) bool {
	if len(ig.pats) == 0 {
		return false
	}
	segs := segments(rel)
	for i := len(ig.pats) - 1; i >= 0; i-- {
		if m := ig.pats[i].Match(segs, isDir); m != gitignore.NoMatch {
			return m == gitignore.Exclude
		}
	}
	return false
}

func segments(rel string) []string {
	if rel == "." || rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

var errEnough = errors.New("enough matches")
