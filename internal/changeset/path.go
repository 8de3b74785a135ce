package changeset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors callers branch on.
var (
	// ErrBadPath: a path is absolute, not clean, climbs with "..", or
	// contains NUL.
	ErrBadPath = errors.New("changeset: invalid path")
	// ErrSymlink: a path crosses a symbolic link, which is never followed.
	ErrSymlink = errors.New("changeset: path crosses a symbolic link")
	// ErrUnsupported: the upper directory holds something this package
	// does not model (a device, a fifo, a redirect or metacopy xattr).
	ErrUnsupported = errors.New("changeset: unsupported entry in the upper directory")
	// ErrNoBase: the change set has no recorded base, so Apply cannot
	// detect conflicts and refuses.
	ErrNoBase = errors.New("changeset: no base recorded")
)

// CheckPath validates a workspace-relative path and returns it cleaned of a
// trailing slash. "." is the workspace root.
func CheckPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q contains NUL", ErrBadPath, p)
	}
	q := strings.TrimSuffix(p, "/")
	if q == "" || q == "." {
		return ".", nil
	}
	if path.IsAbs(q) || path.Clean(q) != q || !fs.ValidPath(q) {
		return "", fmt.Errorf("%w: %q must be relative, clean and inside the workspace", ErrBadPath, p)
	}
	return q, nil
}

// Kind is the type of a tree entry.
type Kind uint8

// The kinds. KindNone means absent.
const (
	KindNone Kind = iota
	KindFile
	KindDir
	KindSymlink
	KindOther
)

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindOther:
		return "other"
	}
	return "none"
}

// MarshalText renders the kind as its name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for _, c := range []Kind{KindNone, KindFile, KindDir, KindSymlink, KindOther} {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("changeset: unknown kind %q", b)
}

// node is one lstat'ed entry of a layer.
type node struct {
	kind     Kind
	perm     fs.FileMode // permission and setuid/setgid/sticky bits
	size     int64
	target   string // symlink target
	whiteout bool
	opaque   bool // directory with the overlay opaque xattr
	ino      uint64
	mtime    int64
	ctime    int64
}

const (
	resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
)

// openDir opens root/rel as an O_PATH directory descriptor without
// following any symlink and without leaving root.
func openDir(root, rel string) (int, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	if rel == "." {
		return rfd, nil
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return -1, mapResolveErr(root, rel, err)
	}
	return fd, nil
}

func mapResolveErr(root, rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %s", ErrSymlink, rel)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s leaves %s", ErrSymlink, rel, root)
	}
	return &fs.PathError{Op: "open", Path: path.Join(root, rel), Err: err}
}

func splitRel(rel string) (dir, base string) {
	d, b := path.Split(rel)
	d = strings.TrimSuffix(d, "/")
	if d == "" {
		d = "."
	}
	return d, b
}

// lstatNode returns the entry at root/rel without following symlinks. An
// absent entry (or an absent parent) is KindNone with a nil error; below a
// non-directory or a symlink is KindNone too.
func lstatNode(root, rel string, wantXattr bool) (node, error) {
	if rel == "." {
		var st unix.Stat_t
		if err := unix.Stat(root, &st); err != nil {
			return node{}, &fs.PathError{Op: "stat", Path: root, Err: err}
		}
		return nodeFromStat(&st), nil
	}
	dir, base := splitRel(rel)
	dfd, err := openDir(root, dir)
	if err != nil {
		// Nothing exists below a missing entry, a non-directory or a
		// symlink (which this package never follows).
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, ErrSymlink) {
			return node{}, nil
		}
		return node{}, err
	}
	defer unix.Close(dfd)
	return lstatAt(dfd, base, root, rel, wantXattr)
}

func lstatAt(dfd int, base, root, rel string, wantXattr bool) (node, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return node{}, nil
		}
		return node{}, &fs.PathError{Op: "lstat", Path: path.Join(root, rel), Err: err}
	}
	n := nodeFromStat(&st)
	switch n.kind {
	case KindSymlink:
		buf := make([]byte, 4096)
		k, err := unix.Readlinkat(dfd, base, buf)
		if err != nil {
			return node{}, &fs.PathError{Op: "readlink", Path: path.Join(root, rel), Err: err}
		}
		n.target = string(buf[:k])
	case KindOther:
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			n.whiteout = true
			n.kind = KindNone
		}
	}
	if !wantXattr || (n.kind != KindDir && !(n.kind == KindFile && n.size == 0)) {
		return n, nil
	}
	xp := fmt.Sprintf("/proc/self/fd/%d/%s", dfd, base)
	if n.kind == KindDir {
		for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
			if v, ok := getxattr(xp, attr); ok && v == "y" {
				n.opaque = true
			}
		}
		for _, attr := range []string{"trusted.overlay.redirect", "user.overlay.redirect"} {
			if _, ok := getxattr(xp, attr); ok {
				return node{}, fmt.Errorf("%w: %s has a redirect xattr (mount with redirect_dir=off)", ErrUnsupported, path.Join(root, rel))
			}
		}
		return n, nil
	}
	for _, attr := range []string{"trusted.overlay.whiteout", "user.overlay.whiteout"} {
		if _, ok := getxattr(xp, attr); ok {
			n.whiteout = true
			n.kind = KindNone
		}
	}
	for _, attr := range []string{"trusted.overlay.metacopy", "user.overlay.metacopy"} {
		if _, ok := getxattr(xp, attr); ok {
			return node{}, fmt.Errorf("%w: %s is a metacopy (mount with metacopy=off)", ErrUnsupported, path.Join(root, rel))
		}
	}
	return n, nil
}

func getxattr(p, attr string) (string, bool) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

func nodeFromStat(st *unix.Stat_t) node {
	n := node{
		perm:  fs.FileMode(st.Mode & 0o777),
		size:  st.Size,
		ino:   st.Ino,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}
	if st.Mode&unix.S_ISUID != 0 {
		n.perm |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		n.perm |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		n.perm |= fs.ModeSticky
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		n.kind = KindFile
	case unix.S_IFDIR:
		n.kind = KindDir
	case unix.S_IFLNK:
		n.kind = KindSymlink
		n.perm = 0o777
	default:
		n.kind = KindOther
	}
	return n
}

// readNames lists the names in root/rel (a directory), sorted.
func readNames(root, rel string) ([]string, error) {
	dfd, err := openDir(root, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	names, err := namesAt(dfd, root, rel)
	if err != nil {
		return nil, err
	}
	sortStrings(names)
	return names, nil
}

// namesAt lists the names in the directory open as dfd (root/rel, for
// errors), through a descriptor of its own so dfd stays usable.
func namesAt(dfd int, root, rel string) ([]string, error) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path.Join(root, rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(root, rel))
	defer f.Close()
	return f.Readdirnames(-1)
}

// unixPerm converts an fs.FileMode's permission bits to mode_t bits.
func unixPerm(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}
