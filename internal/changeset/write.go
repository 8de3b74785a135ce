package changeset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotDir: a path component is not a directory in the merged view.
var ErrNotDir = errors.New("changeset: not a directory")

// WriteFile writes data to rel in the upper layer, as a write through the
// overlay mount would: missing parent directories are created (copied up
// from the lower layer with their modes, or new with 0755), a whiteout at
// rel or at a parent is replaced (a directory replacing a whiteout is made
// opaque). perm 0 keeps the mode of an existing file, or uses 0644.
func (cs *ChangeSet) WriteFile(rel string, data []byte, perm fs.FileMode) error {
	rel, err := CheckPath(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: cannot write the workspace root", ErrBadPath)
	}
	cur, err := cs.lookup(rel)
	if err != nil {
		return err
	}
	switch cur.kind {
	case KindDir:
		return &fs.PathError{Op: "write", Path: rel, Err: unix.EISDIR}
	case KindSymlink:
		return fmt.Errorf("%w: %s is a symlink", ErrSymlink, rel)
	}
	if cur.kind == KindFile && cur.layer == LayerLower {
		cs.keepBase(rel) // first write: keep what the file was
	}
	if perm == 0 {
		perm = 0o644
		if cur.kind == KindFile {
			perm = cur.perm
		}
	}
	if err := cs.mkdirUpper(path.Dir(rel)); err != nil {
		return err
	}
	up := osFS{root: cs.upper}
	tmp := randomName(rel, "tmp")
	if err := up.WriteTemp(tmp, bytes.NewReader(data), unixPerm(perm)); err != nil {
		return fmt.Errorf("changeset: write %s: %w", rel, err)
	}
	// rename(2) replaces a whiteout (a character device) in place.
	if err := up.Rename(tmp, rel); err != nil {
		_ = up.Remove(tmp)
		return fmt.Errorf("changeset: write %s: %w", rel, err)
	}
	return nil
}

// MkdirAll creates rel and its parents in the merged view.
func (cs *ChangeSet) MkdirAll(rel string) error {
	rel, err := CheckPath(rel)
	if err != nil {
		return err
	}
	return cs.mkdirUpper(rel)
}

// mkdirUpper makes rel a directory in the upper layer, creating parents.
func (cs *ChangeSet) mkdirUpper(rel string) error {
	if rel == "." {
		return nil
	}
	up := osFS{root: cs.upper}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		m, err := cs.lookup(p)
		if err != nil {
			return err
		}
		u, err := lstatNode(cs.upper, p, false)
		if err != nil {
			return err
		}
		switch {
		case m.kind == KindDir && u.kind == KindDir:
			continue
		case m.kind == KindDir:
			// copy up the lower directory with its mode
			if err := up.Mkdir(p, unixPerm(m.perm)); err != nil {
				return fmt.Errorf("changeset: copy up %s: %w", p, err)
			}
		case m.kind == KindNone:
			opaque := u.whiteout
			if opaque {
				if err := up.Remove(p); err != nil {
					return fmt.Errorf("changeset: replace whiteout %s: %w", p, err)
				}
			}
			if err := up.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("changeset: mkdir %s: %w", p, err)
			}
			if opaque {
				if err := setOpaque(cs.upper, p); err != nil {
					return err
				}
			}
		case m.kind == KindSymlink:
			return fmt.Errorf("%w: %s", ErrSymlink, p)
		default:
			return fmt.Errorf("%w: %s", ErrNotDir, p)
		}
	}
	return nil
}

func setOpaque(root, rel string) error {
	dir, base := splitRel(rel)
	dfd, err := openDir(root, dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	xp := fmt.Sprintf("/proc/self/fd/%d/%s", dfd, base)
	// Marked for both kinds of overlay that mount the upper: the native
	// sandboxes' (userxattr) read user.overlay.*, a container's workspace
	// trusted.overlay.*. One is enough where the other cannot be set:
	// only root sets trusted.* (a kernel that is not root has no
	// container sandboxes), and an upper whose filesystem takes no user.*
	// xattrs cannot be a native sandbox's.
	errUser := unix.Lsetxattr(xp, "user.overlay.opaque", []byte("y"), 0)
	errTrusted := unix.Lsetxattr(xp, "trusted.overlay.opaque", []byte("y"), 0)
	if errUser != nil && errTrusted != nil {
		return fmt.Errorf("changeset: mark %s opaque: %w", rel, errors.Join(errUser, errTrusted))
	}
	return nil
}

// Remove deletes rel from the merged view, as rm -r through the mount
// would: the upper entry goes, and when the lower layer has rel a whiteout
// (character device 0/0) hides it. A directory must be empty unless
// recursive is set.
func (cs *ChangeSet) Remove(rel string, recursive bool) error {
	rel, err := CheckPath(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: cannot remove the workspace root", ErrBadPath)
	}
	m, err := cs.lookup(rel)
	if err != nil {
		return err
	}
	if m.kind == KindNone {
		return &fs.PathError{Op: "remove", Path: rel, Err: fs.ErrNotExist}
	}
	if m.kind == KindFile && m.layer == LayerLower {
		cs.keepBase(rel)
	}
	if m.kind == KindDir && !recursive {
		kids, err := cs.children(rel, m)
		if err != nil {
			return err
		}
		if len(kids) > 0 {
			return &fs.PathError{Op: "remove", Path: rel, Err: unix.ENOTEMPTY}
		}
	}
	if err := cs.mkdirUpper(path.Dir(rel)); err != nil {
		return err
	}
	up := osFS{root: cs.upper}
	if err := up.RemoveAll(rel); err != nil {
		return fmt.Errorf("changeset: remove %s: %w", rel, err)
	}
	// Does the lower layer still show through?
	after, err := cs.lookup(rel)
	if err != nil {
		return err
	}
	if after.kind == KindNone {
		return nil
	}
	return up.at(rel, func(dfd int, base string) error {
		return unix.Mknodat(dfd, base, unix.S_IFCHR, 0) // mode 0, device 0/0: a whiteout
	})
}

// Discard drops the changes at or below paths (all when none), restoring
// the real tree's view there. A path whose change comes from an ancestor
// (a deleted or replaced directory) must be discarded through that
// ancestor. Discard must not run while a sandbox has the change set
// mounted.
func (cs *ChangeSet) Discard(ctx context.Context, paths ...string) error {
	s, err := selection(paths)
	if err != nil {
		return err
	}
	unlock, err := cs.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	up := osFS{root: cs.upper}
	if len(s) == 0 {
		names, err := readNames(cs.upper, ".")
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := up.RemoveAll(n); err != nil {
				return fmt.Errorf("changeset: discard: %w", err)
			}
		}
		return nil
	}
	for _, p := range s {
		if err := ctx.Err(); err != nil {
			return err
		}
		opaque := false
		for a := path.Dir(p); a != "."; a = path.Dir(a) {
			n, err := lstatNode(cs.upper, a, true)
			if err != nil {
				return err
			}
			if n.whiteout || (n.kind != KindNone && n.kind != KindDir) {
				return fmt.Errorf("changeset: %s was removed or replaced with %s: discard %s instead", p, a, a)
			}
			if n.opaque {
				opaque = true
			}
		}
		if err := up.RemoveAll(p); err != nil {
			return fmt.Errorf("changeset: discard %s: %w", p, err)
		}
		if opaque {
			if err := cs.copyUp(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyUp copies the lower entry at rel (recursively) into the upper layer.
func (cs *ChangeSet) copyUp(rel string) error {
	n, err := lstatNode(cs.workspace, rel, false)
	if err != nil || n.kind == KindNone {
		return err
	}
	up := osFS{root: cs.upper}
	switch n.kind {
	case KindFile:
		f, err := openFile(cs.workspace, rel)
		if err != nil {
			return err
		}
		defer f.Close()
		return up.WriteTemp(rel, f, unixPerm(n.perm))
	case KindSymlink:
		return up.Symlink(n.target, rel)
	case KindDir:
		if err := up.Mkdir(rel, unixPerm(n.perm)); err != nil {
			return err
		}
		names, err := readNames(cs.workspace, rel)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := cs.copyUp(path.Join(rel, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
