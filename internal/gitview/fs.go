package gitview

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// FS is a billy.Filesystem over a change set's merged view, rooted at a
// workspace-relative directory. Reads go through the merged view
// (whiteouts honoured, no symlink ever followed on the host); writes
// are buffered in memory and land in the change set's upper layer when
// the file is closed. Nothing outside the workspace's view is reachable:
// a path that climbs out of the root is billy.ErrCrossedBoundary.
//
// Symlinks in the view are shown as symlinks (Lstat, Readlink) and are
// followed by Stat and Open only within the view. Writes need exclusive
// use of the change set (the router runs writing calls alone).
type FS struct {
	cs   *changeset.ChangeSet
	root string // workspace-relative, "." for the workspace root
	// ctx, when set, ends every operation once it is done, so a long
	// walk of the git library stops when its call is cancelled.
	ctx context.Context
	// roots, when set, holds O_PATH descriptors of both layers' roots:
	// files then report their modification time (from the layer that
	// holds them), which lets the git library trust the index for
	// unchanged files instead of hashing every file, as git does. A file
	// the session wrote has the time it was written in the upper layer,
	// never earlier than the index it differs from.
	roots *roots
	// skipDir, when set, hides directories from ReadDir: ignored ones
	// that hold nothing tracked, so the git library does not walk them.
	skipDir func(rel string) bool
}

// roots are the layers' root descriptors.
type roots struct{ lower, upper int }

var (
	_ billy.Filesystem = (*FS)(nil)
	_ billy.Capable    = (*FS)(nil)
)

// NewFS returns the merged view of cs rooted at the workspace-relative
// directory root ("" or "." for the workspace root).
func NewFS(cs *changeset.ChangeSet, root string) (*FS, error) {
	r, err := changeset.CheckPath(root)
	if err != nil {
		return nil, err
	}
	return &FS{cs: cs, root: r}, nil
}

// rel maps a billy path (relative to the root; a leading slash means the
// root) to a workspace-relative one.
func (f *FS) rel(name string) (string, error) {
	if f.ctx != nil {
		if err := f.ctx.Err(); err != nil {
			return "", err
		}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", &fs.PathError{Op: "open", Path: name, Err: changeset.ErrBadPath}
	}
	clean := path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	if strings.Contains(name, "..") {
		// path.Clean("/"+name) cannot climb above "/", so a ".." that
		// would have left the root is caught by comparing segment counts.
		if depth(name) < 0 {
			return "", &fs.PathError{Op: "open", Path: name, Err: billy.ErrCrossedBoundary}
		}
	}
	r := strings.TrimPrefix(clean, "/")
	if r == "" {
		return f.root, nil
	}
	if f.root == "." {
		return r, nil
	}
	return f.root + "/" + r, nil
}

// depth returns the lowest directory depth name reaches (negative when a
// ".." climbs above its start).
func depth(name string) int {
	d, low := 0, 0
	for _, s := range strings.Split(name, "/") {
		switch s {
		case "", ".":
		case "..":
			d--
			low = min(low, d)
		default:
			d++
		}
	}
	return low
}

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// mapErr turns the change set's "crosses a symlink" into not-exist, as
// git sees a path beyond a symlink.
func mapErr(op, name string, err error) error {
	if errors.Is(err, changeset.ErrSymlink) || errors.Is(err, changeset.ErrNotDir) {
		return notExist(op, name)
	}
	return err
}

// resolve follows symlinks at the end of rel within the view (at most 40),
// returning the final entry; a link leaving the view is not-exist.
func (f *FS) resolve(name, rel string) (changeset.Entry, string, error) {
	for range 40 {
		e, err := f.cs.Stat(rel)
		if err != nil {
			return e, rel, mapErr("stat", name, err)
		}
		if e.Kind != changeset.KindSymlink {
			return e, rel, nil
		}
		t := e.Target
		if path.IsAbs(t) {
			return e, rel, notExist("stat", name)
		}
		next := path.Join(path.Dir(rel), t)
		if next == ".." || strings.HasPrefix(next, "../") {
			return e, rel, notExist("stat", name)
		}
		rel = next
	}
	return changeset.Entry{}, rel, notExist("stat", name)
}

// Capabilities: read, write, seek, truncate; locks are no-ops (the
// router serialises writers).
func (f *FS) Capabilities() billy.Capability {
	return billy.WriteCapability | billy.ReadCapability | billy.ReadAndWriteCapability |
		billy.SeekCapability | billy.TruncateCapability | billy.LockCapability
}

// Create creates or truncates name for writing.
func (f *FS) Create(name string) (billy.File, error) {
	return f.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Open opens name for reading.
func (f *FS) Open(name string) (billy.File, error) { return f.OpenFile(name, os.O_RDONLY, 0) }

const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

// OpenFile opens name; any write flag gives an in-memory file written to
// the change set on Close.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	rel, err := f.rel(name)
	if err != nil {
		return nil, err
	}
	if flag&writeFlags == 0 {
		// One merged lookup for a plain file; a symlink is resolved
		// within the view first.
		osf, err := f.cs.Open(rel)
		if errors.Is(err, changeset.ErrSymlink) {
			var e changeset.Entry
			var real string
			if e, real, err = f.resolve(name, rel); err != nil {
				return nil, err
			}
			if e.Kind == changeset.KindDir {
				return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("is a directory")}
			}
			osf, err = f.cs.Open(real)
		}
		if err != nil {
			return nil, mapErr("open", name, err)
		}
		return &readFile{File: osf, name: name, ctx: f.ctx}, nil
	}
	e, err := f.cs.Stat(rel)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, mapErr("open", name, err)
	}
	switch {
	case exists && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !exists && flag&os.O_CREATE == 0:
		return nil, notExist("open", name)
	case exists && e.Kind != changeset.KindFile:
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("not a regular file")}
	}
	w := &memFile{fs: f, name: name, rel: rel, perm: perm.Perm(), append: flag&os.O_APPEND != 0}
	if exists {
		w.perm = e.Mode.Perm()
		if flag&os.O_TRUNC == 0 {
			if w.buf, err = f.cs.ReadFile(rel); err != nil {
				return nil, err
			}
		}
	}
	if w.perm == 0 {
		w.perm = 0o644
	}
	return w, nil
}

// Stat returns name's entry, following symlinks within the view.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	rel, err := f.rel(name)
	if err != nil {
		return nil, err
	}
	e, _, err := f.resolve(name, rel)
	if err != nil {
		return nil, err
	}
	return f.info(e, path.Base(rel)), nil
}

// Lstat returns name's entry without following a final symlink.
func (f *FS) Lstat(name string) (os.FileInfo, error) {
	rel, err := f.rel(name)
	if err != nil {
		return nil, err
	}
	e, err := f.cs.Stat(rel)
	if err != nil {
		return nil, mapErr("lstat", name, err)
	}
	return f.info(e, path.Base(rel)), nil
}

// Readlink returns the target of the symlink name.
func (f *FS) Readlink(name string) (string, error) {
	rel, err := f.rel(name)
	if err != nil {
		return "", err
	}
	e, err := f.cs.Stat(rel)
	if err != nil {
		return "", mapErr("readlink", name, err)
	}
	if e.Kind != changeset.KindSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return e.Target, nil
}

// Symlink is not supported: nothing fluffy writes through git needs one.
func (f *FS) Symlink(target, link string) error {
	return &fs.PathError{Op: "symlink", Path: link, Err: billy.ErrNotSupported}
}

// Rename moves a file (read, written under the new name, removed).
func (f *FS) Rename(from, to string) error {
	rf, err := f.rel(from)
	if err != nil {
		return err
	}
	rt, err := f.rel(to)
	if err != nil {
		return err
	}
	e, err := f.cs.Stat(rf)
	if err != nil {
		return mapErr("rename", from, err)
	}
	if e.Kind != changeset.KindFile {
		return &fs.PathError{Op: "rename", Path: from, Err: billy.ErrNotSupported}
	}
	data, err := f.cs.ReadFile(rf)
	if err != nil {
		return err
	}
	if err := f.put(rt, data, e.Mode.Perm()); err != nil {
		return err
	}
	return f.cs.Remove(rf, false)
}

// Remove deletes a file or an empty directory.
func (f *FS) Remove(name string) error {
	rel, err := f.rel(name)
	if err != nil {
		return err
	}
	return mapErr("remove", name, f.cs.Remove(rel, false))
}

// Join joins path elements.
func (f *FS) Join(elem ...string) string { return path.Join(elem...) }

// TempFile creates a new file in dir whose name starts with prefix.
func (f *FS) TempFile(dir, prefix string) (billy.File, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return f.OpenFile(path.Join(dir, prefix+hex.EncodeToString(b[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

// ReadDir lists a directory of the view, sorted by name.
func (f *FS) ReadDir(name string) ([]os.FileInfo, error) {
	rel, err := f.rel(name)
	if err != nil {
		return nil, err
	}
	ents, err := f.cs.ReadDir(rel)
	if err != nil {
		return nil, mapErr("readdir", name, err)
	}
	out := make([]os.FileInfo, 0, len(ents))
	for _, e := range ents {
		if f.skipDir != nil && e.Kind == changeset.KindDir && f.skipDir(e.Path) {
			continue
		}
		out = append(out, f.info(e, path.Base(e.Path)))
	}
	return out, nil
}

// MkdirAll creates a directory and its parents in the upper layer.
func (f *FS) MkdirAll(name string, _ os.FileMode) error {
	rel, err := f.rel(name)
	if err != nil {
		return err
	}
	return mapErr("mkdir", name, f.cs.MkdirAll(rel))
}

// Chroot returns the view rooted at p.
func (f *FS) Chroot(p string) (billy.Filesystem, error) {
	rel, err := f.rel(p)
	if err != nil {
		return nil, err
	}
	return &FS{cs: f.cs, root: rel, ctx: f.ctx, roots: f.roots}, nil
}

// Root returns the absolute path the view stands for (never opened
// through the host file system by this package).
func (f *FS) Root() string { return path.Join(f.cs.Workspace(), f.root) }

func (f *FS) put(rel string, data []byte, perm fs.FileMode) error {
	if d := path.Dir(rel); d != "." {
		if err := f.cs.MkdirAll(d); err != nil {
			return mapErr("write", rel, err)
		}
	}
	if err := f.cs.WriteFile(rel, data, perm); err != nil {
		return fmt.Errorf("gitview: write %s: %w", rel, err)
	}
	return nil
}

// info returns e as an os.FileInfo, with the modification time of a
// file when the FS has the layers' descriptors.
func (f *FS) info(e changeset.Entry, name string) info {
	i := info{e: e, name: name}
	if f.roots == nil || e.Kind != changeset.KindFile {
		return i
	}
	root := f.roots.lower
	if e.Layer == changeset.LayerUpper {
		root = f.roots.upper
	}
	fd, err := unix.Openat2(root, e.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return i
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		i.mtime = time.Unix(st.Mtim.Unix())
	}
	return i
}

// info is a merged entry as an os.FileInfo.
type info struct {
	e     changeset.Entry
	name  string
	mtime time.Time
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.e.Size }
func (i info) ModTime() time.Time { return i.mtime }
func (i info) IsDir() bool        { return i.e.Kind == changeset.KindDir }
func (i info) Sys() any           { return nil }
func (i info) Mode() fs.FileMode {
	switch i.e.Kind {
	case changeset.KindDir:
		return fs.ModeDir | i.e.Mode.Perm()
	case changeset.KindSymlink:
		return fs.ModeSymlink | i.e.Mode.Perm()
	case changeset.KindOther:
		return fs.ModeIrregular | i.e.Mode.Perm()
	}
	return i.e.Mode.Perm()
}

// readFile is a file of the view opened for reading.
type readFile struct {
	*os.File
	name string
	// ctx, when set, ends reads once it is done: git hashes whole files
	// (a huge one takes long), and a cancelled tool must stop between
	// chunks.
	ctx context.Context
}

func (r *readFile) Read(p []byte) (int, error) {
	if r.ctx != nil {
		if err := r.ctx.Err(); err != nil {
			return 0, err
		}
	}
	return r.File.Read(p)
}

func (r *readFile) ReadAt(p []byte, off int64) (int, error) {
	if r.ctx != nil {
		if err := r.ctx.Err(); err != nil {
			return 0, err
		}
	}
	return r.File.ReadAt(p, off)
}

func (r *readFile) Name() string              { return r.name }
func (r *readFile) Write([]byte) (int, error) { return 0, billy.ErrReadOnly }
func (r *readFile) Lock() error               { return nil }
func (r *readFile) Unlock() error             { return nil }
func (r *readFile) Truncate(int64) error      { return billy.ErrReadOnly }

// memFile is a file opened for writing: its content is kept in memory and
// written to the change set by Close.
type memFile struct {
	fs     *FS
	name   string
	rel    string
	perm   fs.FileMode
	buf    []byte
	pos    int64
	append bool
	closed bool
}

func (m *memFile) Name() string { return m.name }

func (m *memFile) Write(p []byte) (int, error) {
	if m.closed {
		return 0, os.ErrClosed
	}
	if m.append {
		m.pos = int64(len(m.buf))
	}
	end := m.pos + int64(len(p))
	if end > int64(len(m.buf)) {
		m.buf = append(m.buf, make([]byte, end-int64(len(m.buf)))...)
	}
	copy(m.buf[m.pos:], p)
	m.pos = end
	return len(p), nil
}

func (m *memFile) Read(p []byte) (int, error) {
	if m.closed {
		return 0, os.ErrClosed
	}
	if m.pos >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[m.pos:])
	m.pos += int64(n)
	return n, nil
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fs.ErrInvalid
	}
	if off >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) Seek(off int64, whence int) (int64, error) {
	var base int64
	switch whence {
	case io.SeekCurrent:
		base = m.pos
	case io.SeekEnd:
		base = int64(len(m.buf))
	}
	if base+off < 0 {
		return 0, fs.ErrInvalid
	}
	m.pos = base + off
	return m.pos, nil
}

func (m *memFile) Truncate(size int64) error {
	if size < 0 {
		return fs.ErrInvalid
	}
	if size <= int64(len(m.buf)) {
		m.buf = m.buf[:size]
	} else {
		m.buf = append(m.buf, bytes.Repeat([]byte{0}, int(size)-len(m.buf))...)
	}
	return nil
}

func (m *memFile) Lock() error   { return nil }
func (m *memFile) Unlock() error { return nil }

// Close writes the content to the change set.
func (m *memFile) Close() error {
	if m.closed {
		return os.ErrClosed
	}
	m.closed = true
	return m.fs.put(m.rel, m.buf, m.perm)
}
