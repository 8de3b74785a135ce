package skill

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/treedigest"
)

// SignatureFile is the name of the SSH signature a skill's folder may
// carry (ssh-keygen -Y sign -n fluffy-skill over the folder's digest). It
// is outside the digest, which it signs.
const SignatureFile = "skill.sig"

// SignatureNamespace is the ssh-keygen namespace skill signatures use, so
// a signature made for something else (a git commit, a file) never
// verifies as a skill's.
const SignatureNamespace = "fluffy-skill"

// digestVersion heads the canonical form, so a later form cannot be
// mistaken for this one.
const digestVersion = "fluffy-skill-digest-v1\n"

// ErrUnsupportedFile: a skill's folder holds something other than
// directories and regular files (a symlink, a device, a FIFO). Links are
// refused rather than pinned: a link pinned by its target text still
// reads whatever lies at that target, which can be outside the folder
// and change without the pin noticing.
var ErrUnsupportedFile = treedigest.ErrUnsupported

// FileError names the file a folder operation refused.
type FileError = treedigest.FileError

// entry is one file or directory of a skill's folder, in canonical order.
type entry = treedigest.Entry

// skipped: what a folder's digest and copy leave out. A clone's .git is
// the transport, not the skill; the signature signs the digest.
func skipped(rel string, dir bool) bool {
	base := filepath.Base(rel)
	return (dir && base == ".git") || (!dir && rel == SignatureFile)
}

// listTree reads dir's entries, sorted by path, refusing anything but
// directories and regular files.
func listTree(dir string) ([]entry, error) {
	return treedigest.List(dir, treedigest.Options{Skip: skipped, Links: treedigest.RefuseLinks})
}

// Digest is the pin of a skill's folder: "sha256:" and the hex SHA-256 of
// its canonical listing (paths, execute bits and contents; see
// docs/skills.md). A .git directory and the signature file are
// left out; a symlink or any other special file is an error
// (ErrUnsupportedFile).
func Digest(dir string) (string, error) {
	es, err := listTree(dir)
	if err != nil {
		return "", fmt.Errorf("skill: digest %s: %w", dir, err)
	}
	return digestOf(es), nil
}

func digestOf(es []entry) string { return treedigest.Sum(digestVersion, es) }

// copyTree copies src's entries (as listTree saw them) into dst, which
// must not exist: files 0644 or 0755 by their execute bit. fit, when
// set, judges the listing before anything is copied. It returns the
// entries copied, hashed as written, so the caller pins what landed.
func copyTree(src, dst string, fit func([]entry) error) ([]entry, error) {
	es, err := listTree(src)
	if err != nil {
		return nil, err
	}
	if fit != nil {
		if err := fit(es); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return nil, err
	}
	for _, e := range es {
		to := filepath.Join(dst, filepath.FromSlash(e.Rel))
		if e.Dir {
			if err := os.Mkdir(to, 0o755); err != nil {
				return nil, err
			}
			continue
		}
		mode := fs.FileMode(0o644)
		if e.Exec {
			mode = 0o755
		}
		if err := copyFile(filepath.Join(src, filepath.FromSlash(e.Rel)), to, mode); err != nil {
			return nil, err
		}
	}
	return listTree(dst)
}

func copyFile(from, to string, mode fs.FileMode) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if info, err := in.Stat(); err != nil {
		return err
	} else if !info.Mode().IsRegular() {
		return &FileError{Path: from, Err: ErrUnsupportedFile}
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
