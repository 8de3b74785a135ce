package changeset

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// applyFS is the real tree as Apply mutates it. Paths are validated,
// workspace-relative; no method follows a symlink in any component. It is
// an interface so tests can inject failures and prove the rollback.
type applyFS interface {
	Lstat(rel string) (node, error)
	Names(rel string) ([]string, error)
	Hash(rel string) (string, error)
	// WriteTemp creates rel exclusively with perm and copies r into it
	// (not synced: see Sync).
	WriteTemp(rel string, r io.Reader, perm uint32) error
	// Sync makes everything written to the tree's file system durable.
	Sync() error
	Symlink(target, rel string) error
	Link(oldRel, newRel string) error
	Rename(oldRel, newRel string) error
	Mkdir(rel string, perm uint32) error
	Chmod(rel string, perm uint32) error
	// Remove removes a file, symlink or empty directory.
	Remove(rel string) error
	RemoveAll(rel string) error
}

// osFS is applyFS on the real workspace.
type osFS struct{ root string }

var _ applyFS = osFS{}

func (o osFS) at(rel string, f func(dfd int, base string) error) error {
	dir, base := splitRel(rel)
	dfd, err := openDir(o.root, dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := f(dfd, base); err != nil {
		return &fs.PathError{Op: "apply", Path: path.Join(o.root, rel), Err: err}
	}
	return nil
}

func (o osFS) Lstat(rel string) (node, error)     { return lstatNode(o.root, rel, false) }
func (o osFS) Names(rel string) ([]string, error) { return readNames(o.root, rel) }
func (o osFS) Hash(rel string) (string, error)    { return hashFile(o.root, rel, nil) }

func (o osFS) WriteTemp(rel string, r io.Reader, perm uint32) error {
	return o.at(rel, func(dfd int, base string) error {
		fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), base)
		_, werr := io.Copy(f, r)
		cerr := unix.Fchmod(fd, perm)
		return errors.Join(werr, cerr, f.Close())
	})
}

func (o osFS) Symlink(target, rel string) error {
	return o.at(rel, func(dfd int, base string) error { return unix.Symlinkat(target, dfd, base) })
}

func (o osFS) Link(oldRel, newRel string) error {
	return o.at(oldRel, func(ofd int, obase string) error {
		return o.at(newRel, func(nfd int, nbase string) error { return unix.Linkat(ofd, obase, nfd, nbase, 0) })
	})
}

func (o osFS) Rename(oldRel, newRel string) error {
	return o.at(oldRel, func(ofd int, obase string) error {
		return o.at(newRel, func(nfd int, nbase string) error { return unix.Renameat(ofd, obase, nfd, nbase) })
	})
}

func (o osFS) Mkdir(rel string, perm uint32) error {
	return o.at(rel, func(dfd int, base string) error {
		if err := unix.Mkdirat(dfd, base, 0o700); err != nil {
			return err
		}
		return chmodNoFollow(dfd, base, perm)
	})
}

func (o osFS) Chmod(rel string, perm uint32) error {
	return o.at(rel, func(dfd int, base string) error { return chmodNoFollow(dfd, base, perm) })
}

// chmodNoFollow changes the mode of a file or directory, never of what a
// symlink points to.
func chmodNoFollow(dfd int, base string, perm uint32) error {
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, perm)
}

func (o osFS) Remove(rel string) error {
	return o.at(rel, func(dfd int, base string) error {
		err := unix.Unlinkat(dfd, base, 0)
		if errors.Is(err, unix.EISDIR) {
			err = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
		}
		return err
	})
}

func (o osFS) RemoveAll(rel string) error {
	n, err := o.Lstat(rel)
	if err != nil {
		return err
	}
	if n.kind == KindDir {
		names, err := o.Names(rel)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := o.RemoveAll(path.Join(rel, name)); err != nil {
				return err
			}
		}
	}
	if n.kind == KindNone && !n.whiteout {
		return nil
	}
	return o.Remove(rel)
}

func (o osFS) Sync() error {
	fd, err := unix.Open(o.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
