package changeset

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Links is the merged view as a symlink reader over absolute paths, for
// resolving the paths a model writes (tool.Resolver's LinkFS): paths in
// the workspace are looked up through the change set, so a symlink the
// session created is followed and one it deleted is not; other paths go to
// the real file system.
type Links struct{ cs *ChangeSet }

// Links returns the change set's symlink reader.
func (cs *ChangeSet) Links() Links { return Links{cs} }

func (l Links) rel(name string) (string, bool) {
	ws := l.cs.workspace
	if name == ws {
		return ".", true
	}
	if strings.HasPrefix(name, ws+"/") {
		return filepath.ToSlash(strings.TrimPrefix(name, ws+"/")), true
	}
	return "", false
}

// Lstat returns the entry at the absolute path name without following a
// final symlink.
func (l Links) Lstat(name string) (fs.FileInfo, error) {
	rel, ok := l.rel(name)
	if !ok {
		return os.Lstat(name)
	}
	e, err := l.cs.Stat(rel)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return entryInfo{e}, nil
}

// LstatStep is Lstat(filepath.Join(dir, name)) (tool.StepLinkFS): with
// the state a previous step returned for dir, it looks only name up in
// the merged directory instead of walking again from the root. The state
// is the merged node of the entry, valid only for the caller's walk.
func (l Links) LstatStep(dir string, dirState any, name string) (fs.FileInfo, any, error) {
	full := filepath.Join(dir, name)
	rel, ok := l.rel(full)
	// A state is only ever returned for an entry in the workspace, so
	// with one, dir is known to be inside; without one, check it.
	parent, haveState := dirState.(mnode)
	var dirRel string
	if ok && !haveState {
		dirRel, ok = l.rel(dir)
	}
	if !ok {
		fi, err := l.Lstat(full)
		return fi, nil, err
	}
	notExist := func() (fs.FileInfo, any, error) {
		return nil, nil, &fs.PathError{Op: "lstat", Path: full, Err: fs.ErrNotExist}
	}
	rel, err := CheckPath(rel)
	if err != nil {
		return notExist()
	}
	if !haveState {
		if parent, err = l.cs.lookup(dirRel); err != nil {
			return notExist()
		}
	}
	// As lookup: nothing exists below a non-directory or a symlink.
	if parent.kind != KindDir {
		return notExist()
	}
	m, err := l.cs.child(parent, rel)
	if err != nil || m.kind == KindNone {
		return notExist()
	}
	return entryInfo{m.entry(rel)}, m, nil
}

// PlainPath reports whether dir/names... is an existing directory or
// regular file of the merged view reached through directories only, with
// no symbolic link, whiteout, opaque directory or special file on the way
// (tool.PathLinkFS). It answers true only when the session's upper layer
// has no entry at the path's first component below the workspace root,
// so that nothing of the upper layer can be on the way (no whiteout, no
// opaque directory, no file of the session's): the merged view there is
// the lower layer alone, and one openat2 with RESOLVE_NO_SYMLINKS on the
// whole path answers what the walk would, component by component. Any
// doubt (an upper entry, a symlink, a missing entry, a special file, an
// error) is false: the caller then walks as before.
func (l Links) PlainPath(dir string, names []string) bool {
	dirRel, ok := l.rel(dir)
	if !ok || len(names) == 0 {
		return false
	}
	ws := l.cs.workspace
	n := len(ws)
	for _, c := range names {
		if c == "" || c == "." || c == ".." || strings.IndexByte(c, '/') >= 0 || strings.IndexByte(c, 0) >= 0 {
			return false
		}
		n += 1 + len(c)
	}
	first := names[0]
	if dirRel != "." {
		if _, err := CheckPath(dirRel); err != nil {
			return false
		}
		first, _, _ = strings.Cut(dirRel, "/")
	}
	return plainPath(l.cs.upper, ws, first, dir, names, n)
}

// plainPath: the upper layer (upper) has nothing at first, and
// dir/names... (dir inside ws, the path's total length n) is a directory
// or regular file of ws reached without a symlink.
func plainPath(upper, ws, first, dir string, names []string, n int) bool {
	var st unix.Stat_t
	up := upper + "/" + first
	if err := unix.Fstatat(unix.AT_FDCWD, up, &st, unix.AT_SYMLINK_NOFOLLOW); err != unix.ENOENT {
		return false
	}
	var b strings.Builder
	b.Grow(n + len(dir) - len(ws))
	b.WriteString(dir)
	for _, c := range names {
		b.WriteByte('/')
		b.WriteString(c)
	}
	// The path is absolute, dir is canonical (inside ws, no symlink) and
	// no name is "..": with no symlink followed, resolution cannot leave
	// dir. O_NOFOLLOW|O_PATH opens a final symlink itself (refused below).
	fd, err := unix.Openat2(unix.AT_FDCWD, b.String(), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
		return true
	}
	return false
}

// Readlink returns the target of the symlink at the absolute path name.
func (l Links) Readlink(name string) (string, error) {
	rel, ok := l.rel(name)
	if !ok {
		return os.Readlink(name)
	}
	e, err := l.cs.Stat(rel)
	if err != nil || e.Kind != KindSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return e.Target, nil
}

// entryInfo is an Entry as an fs.FileInfo.
type entryInfo struct{ e Entry }

func (i entryInfo) Name() string       { return filepath.Base(i.e.Path) }
func (i entryInfo) Size() int64        { return i.e.Size }
func (i entryInfo) ModTime() time.Time { return time.Time{} }
func (i entryInfo) IsDir() bool        { return i.e.Kind == KindDir }
func (i entryInfo) Sys() any           { return i.e }
func (i entryInfo) Mode() fs.FileMode {
	switch i.e.Kind {
	case KindDir:
		return fs.ModeDir | i.e.Mode
	case KindSymlink:
		return fs.ModeSymlink | i.e.Mode
	case KindOther:
		return fs.ModeIrregular | i.e.Mode
	}
	return i.e.Mode
}
