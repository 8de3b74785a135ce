package skill

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
var ErrUnsupportedFile = errors.New("skill: only directories and regular files are allowed")

// FileError names the file a folder operation refused.
type FileError struct {
	Path string // slash path inside the folder
	Err  error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// entry is one file or directory of a skill's folder, in canonical order.
type entry struct {
	rel  string // slash path inside the folder
	dir  bool
	exec bool   // any execute bit set (files)
	sum  string // hex SHA-256 of the contents (files)
	size int64  // bytes hashed (files)
}

// skipped: what a folder's digest and copy leave out. A clone's .git is
// the transport, not the skill; the signature signs the digest.
func skipped(rel string, dir bool) bool {
	base := filepath.Base(rel)
	return (dir && base == ".git") || (!dir && rel == SignatureFile)
}

// listTree reads dir's entries, sorted by path, refusing anything but
// directories and regular files.
func listTree(dir string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if skipped(rel, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			out = append(out, entry{rel: rel, dir: true})
			return nil
		}
		if !d.Type().IsRegular() {
			return &FileError{Path: rel, Err: fmt.Errorf("%w (%s)", ErrUnsupportedFile, kindOf(d.Type()))}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size, sum, err := fileSum(p)
		if err != nil {
			return err
		}
		out = append(out, entry{rel: rel, exec: info.Mode()&0o111 != 0, sum: sum, size: size})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

func fileSum(p string) (int64, string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// canonical is the text a folder's digest hashes: a version line, then
// one line per entry in byte order of its path: "d PATH" for a directory,
// "f MODE SHA256 PATH" for a file, MODE being 755 when any execute bit is
// set and 644 otherwise (what git keeps, so a clone and a copy agree),
// PATH quoted as Go quotes strings (so no name can forge a line).
func canonical(es []entry) string {
	var b strings.Builder
	b.WriteString(digestVersion)
	for _, e := range es {
		if e.dir {
			fmt.Fprintf(&b, "d %s\n", strconv.Quote(e.rel))
			continue
		}
		mode := "644"
		if e.exec {
			mode = "755"
		}
		fmt.Fprintf(&b, "f %s %s %s\n", mode, e.sum, strconv.Quote(e.rel))
	}
	return b.String()
}

// Digest is the pin of a skill's folder: "sha256:" and the hex SHA-256 of
// its canonical listing (paths, execute bits and contents; see
// docs/skills-install.md). A .git directory and the signature file are
// left out; a symlink or any other special file is an error
// (ErrUnsupportedFile).
func Digest(dir string) (string, error) {
	es, err := listTree(dir)
	if err != nil {
		return "", fmt.Errorf("skill: digest %s: %w", dir, err)
	}
	return digestOf(es), nil
}

func digestOf(es []entry) string {
	h := sha256.Sum256([]byte(canonical(es)))
	return "sha256:" + hex.EncodeToString(h[:])
}

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
		to := filepath.Join(dst, filepath.FromSlash(e.rel))
		if e.dir {
			if err := os.Mkdir(to, 0o755); err != nil {
				return nil, err
			}
			continue
		}
		mode := fs.FileMode(0o644)
		if e.exec {
			mode = 0o755
		}
		if err := copyFile(filepath.Join(src, filepath.FromSlash(e.rel)), to, mode); err != nil {
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
