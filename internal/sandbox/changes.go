package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/rogpeppe/go-internal/diff"
	"golang.org/x/sys/unix"
)

// ChangeKind says what happened to a path.
type ChangeKind string

// Change kinds.
const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified"
	Deleted  ChangeKind = "deleted"
)

// Change is one path a sandbox changed, relative to the workspace.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
}

// maxDiffFile caps the size of a file shown in a diff.
const maxDiffFile = 4 << 20

// ReadChanges lists what the overlay upper directory upper changes over the
// workspace lower: added, modified and deleted paths (overlay whiteouts
// and opaque directories understood), sorted by path. It only reads, and
// never follows a symlink found in either tree: the upper directory was
// written by an untrusted process.
func ReadChanges(lower, upper string) ([]Change, error) {
	var out []Change
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == upper {
			return nil
		}
		rel, _ := filepath.Rel(upper, p)
		up, err := os.Lstat(p)
		if err != nil {
			return err
		}
		low, lerr := os.Lstat(filepath.Join(lower, rel))
		inLower := lerr == nil
		if isWhiteout(up) {
			if inLower {
				out = append(out, deletedTree(lower, rel, low)...)
			}
			return nil
		}
		switch {
		case up.IsDir():
			if !inLower || !low.IsDir() {
				if inLower {
					out = append(out, deletedTree(lower, rel, low)...)
				}
				out = append(out, Change{Path: rel, Kind: Added, Type: "dir"})
				return nil
			}
			if isOpaque(p) {
				// Everything in lower below here is hidden unless upper
				// has it again.
				entries, _ := os.ReadDir(filepath.Join(lower, rel))
				for _, e := range entries {
					if _, err := os.Lstat(filepath.Join(p, e.Name())); errors.Is(err, fs.ErrNotExist) {
						info, err := e.Info()
						if err == nil {
							out = append(out, deletedTree(lower, filepath.Join(rel, e.Name()), info)...)
						}
					}
				}
			}
			return nil
		case !inLower:
			out = append(out, Change{Path: rel, Kind: Added, Type: typeOf(up)})
		case low.IsDir():
			out = append(out, deletedTree(lower, rel, low)...)
			out = append(out, Change{Path: rel, Kind: Added, Type: typeOf(up)})
		default:
			same, err := sameFile(filepath.Join(lower, rel), p, low, up)
			if err != nil {
				return err
			}
			if !same {
				out = append(out, Change{Path: rel, Kind: Modified, Type: typeOf(up)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read change set %s: %w", upper, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func typeOf(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symlink"
	case fi.Mode().IsRegular():
		return "file"
	}
	return "other"
}

// isWhiteout: overlayfs marks a deleted path with a 0/0 character device.
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	buf := make([]byte, 8)
	for _, name := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		n, err := unix.Lgetxattr(dir, name, buf)
		if err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

func deletedTree(lower, rel string, fi fs.FileInfo) []Change {
	if !fi.IsDir() {
		return []Change{{Path: rel, Kind: Deleted, Type: typeOf(fi)}}
	}
	var out []Change
	_ = filepath.WalkDir(filepath.Join(lower, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		r, _ := filepath.Rel(lower, p)
		info, err := d.Info()
		if err == nil {
			out = append(out, Change{Path: r, Kind: Deleted, Type: typeOf(info)})
		}
		return nil
	})
	return out
}

func sameFile(lowerPath, upperPath string, low, up fs.FileInfo) (bool, error) {
	if typeOf(low) != typeOf(up) || low.Mode() != up.Mode() {
		return false, nil
	}
	switch typeOf(up) {
	case "symlink":
		a, err1 := os.Readlink(lowerPath)
		b, err2 := os.Readlink(upperPath)
		return err1 == nil && err2 == nil && a == b, nil
	case "file":
		if low.Size() != up.Size() {
			return false, nil
		}
		a, err := readNoFollow(lowerPath, maxDiffFile*4)
		if err != nil {
			return false, err
		}
		b, err := readNoFollow(upperPath, maxDiffFile*4)
		if err != nil {
			return false, err
		}
		return bytes.Equal(a, b), nil
	}
	return true, nil
}

func readNoFollow(p string, max int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// QuotePath returns p as is when it is plain printable text, else Go
// quoted, so a file name cannot carry terminal control sequences.
func QuotePath(p string) string {
	for _, r := range p {
		if !unicode.IsPrint(r) || r == '"' || r == '\\' {
			return strconv.Quote(p)
		}
	}
	return p
}

// WriteDiff writes changes as a unified diff (lower as a/, upper as b/).
// Binary and oversized files are named, not shown.
func WriteDiff(w io.Writer, lower, upper string, changes []Change) error {
	for _, c := range changes {
		if c.Type == "dir" {
			continue
		}
		name := QuotePath(c.Path)
		var old, new []byte
		var err error
		if c.Kind != Added {
			old, err = contentOf(filepath.Join(lower, c.Path))
			if err != nil {
				return err
			}
		}
		if c.Kind != Deleted {
			new, err = contentOf(filepath.Join(upper, c.Path))
			if err != nil {
				return err
			}
		}
		if isBinary(old) || isBinary(new) || len(old) > maxDiffFile || len(new) > maxDiffFile {
			if _, err := fmt.Fprintf(w, "Binary or large file %s %s\n", name, c.Kind); err != nil {
				return err
			}
			continue
		}
		oldName, newName := "a/"+name, "b/"+name
		if c.Kind == Added {
			oldName = "/dev/null"
		}
		if c.Kind == Deleted {
			newName = "/dev/null"
		}
		d := diff.Diff(oldName, old, newName, new)
		if len(d) == 0 {
			// Only the mode changed.
			if _, err := fmt.Fprintf(w, "Mode changed: %s\n", name); err != nil {
				return err
			}
			continue
		}
		if _, err := w.Write(sanitizeDiff(d)); err != nil {
			return err
		}
	}
	return nil
}

// contentOf returns what a diff shows of p: a regular file's bytes, a
// symlink's target, nothing for anything else. The type is p's own, not
// the change's (a file in the workspace may be a symlink in the change
// set), and no link is followed.
func contentOf(p string) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	typ := typeOf(fi)
	if typ == "symlink" {
		t, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		return []byte("symlink -> " + t + "\n"), nil
	}
	if typ != "file" {
		return nil, nil
	}
	return readNoFollow(p, maxDiffFile+1)
}

func isBinary(b []byte) bool { return bytes.IndexByte(b, 0) >= 0 }

// sanitizeDiff replaces control characters other than tab and newline, so
// file contents cannot drive the terminal.
func sanitizeDiff(d []byte) []byte {
	return []byte(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return '�'
	}, string(d)))
}
