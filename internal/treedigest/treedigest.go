// Package treedigest owns the canonical digest of a folder: the pin that
// ties an installed skill or plugin to the files a person approved. The
// listing it hashes keeps paths, execute bits, contents and (where
// allowed) link targets, and nothing a copy or a clone changes (times,
// owners, the umask), so the same files pin the same wherever they land.
package treedigest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Links is what a listing does with a symbolic link.
type Links int

const (
	// RefuseLinks: a link is an error. A link pinned by its target's
	// text still reads whatever lies there, which can change unseen.
	RefuseLinks Links = iota
	// LinksInside: a link whose target stays inside the folder is
	// pinned by its target's text (package trees such as node_modules
	// are full of them); one that leads out is an error.
	LinksInside
)

// Options say what a listing reads.
type Options struct {
	// Skip, when set, leaves out an entry (and, for a directory,
	// everything below it): a checkout's .git, the signature file.
	Skip  func(rel string, dir bool) bool
	Links Links
	// MaxFiles and MaxBytes bound the folder (0: no bound): a bigger
	// one is refused (ErrTooBig) rather than hashed for minutes.
	MaxFiles int
	MaxBytes int64
}

// Entry is one entry of a folder, in canonical order.
type Entry struct {
	Rel  string // slash path inside the folder
	Dir  bool
	Link string // the target's text, for a symlink
	Exec bool   // any execute bit set (files)
	Sum  string // hex SHA-256 of the contents (files)
	Size int64  // bytes hashed (files)
}

var (
	// ErrUnsupported: the folder holds something other than directories,
	// regular files and (with LinksInside) links that stay inside.
	ErrUnsupported = errors.New("unsupported file")
	// ErrTooBig: the folder is over Options.MaxFiles or MaxBytes.
	ErrTooBig = errors.New("folder too big")
)

// FileError names the entry a listing refused.
type FileError struct {
	Path string // slash path inside the folder
	Err  error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// List reads dir's entries, sorted by path in byte order.
func List(dir string, o Options) ([]Entry, error) {
	var out []Entry
	var total int64
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
		if o.Skip != nil && o.Skip(rel, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if o.MaxFiles > 0 && len(out) >= o.MaxFiles {
			return fmt.Errorf("%w: more than %d files", ErrTooBig, o.MaxFiles)
		}
		switch t := d.Type(); {
		case t.IsDir():
			out = append(out, Entry{Rel: rel, Dir: true})
		case t&fs.ModeSymlink != 0 && o.Links == LinksInside:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if to := path.Join(path.Dir(rel), filepath.ToSlash(target)); filepath.IsAbs(target) || to == ".." || strings.HasPrefix(to, "../") {
				return &FileError{Path: rel, Err: fmt.Errorf("%w: a link out of the folder (to %s)", ErrUnsupported, target)}
			}
			out = append(out, Entry{Rel: rel, Link: target})
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if total += info.Size(); o.MaxBytes > 0 && total > o.MaxBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrTooBig, o.MaxBytes)
			}
			size, sum, err := fileSum(p)
			if err != nil {
				return err
			}
			out = append(out, Entry{Rel: rel, Exec: info.Mode()&0o111 != 0, Sum: sum, Size: size})
		default:
			what := kindOf(t)
			if t&fs.ModeSymlink != 0 {
				what += " (links are refused here)"
			}
			allowed := "only directories and regular files are allowed"
			if o.Links == LinksInside {
				allowed = "only directories, regular files and links inside the folder are allowed"
			}
			return &FileError{Path: rel, Err: fmt.Errorf("%w: %s; %s", ErrUnsupported, what, allowed)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Rel, b.Rel) })
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

// fileSum hashes a regular file without following a link or waiting on
// a FIFO put in its place since the walk saw it.
func fileSum(p string) (int64, string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil {
		return 0, "", err
	} else if !info.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%w: %s changed into %s", ErrUnsupported, p, kindOf(info.Mode()))
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Canonical is the text Sum hashes: header (which names the encoding, so
// a later one cannot be mistaken for this), then one line per entry in
// the order given: "d PATH" for a directory, "f MODE SHA256 PATH" for a
// file, MODE being 755 when any execute bit is set and 644 otherwise
// (what git keeps, so a clone and a copy agree), "l SHA256(TARGET) PATH"
// for a link; PATH quoted as Go quotes strings, so no name can forge a
// line.
func Canonical(header string, es []Entry) string {
	var b strings.Builder
	b.WriteString(header)
	for _, e := range es {
		switch {
		case e.Dir:
			fmt.Fprintf(&b, "d %s\n", strconv.Quote(e.Rel))
		case e.Link != "":
			h := sha256.Sum256([]byte(e.Link))
			fmt.Fprintf(&b, "l %s %s\n", hex.EncodeToString(h[:]), strconv.Quote(e.Rel))
		default:
			mode := "644"
			if e.Exec {
				mode = "755"
			}
			fmt.Fprintf(&b, "f %s %s %s\n", mode, e.Sum, strconv.Quote(e.Rel))
		}
	}
	return b.String()
}

// Sum is "sha256:" and the hex SHA-256 of Canonical(header, es).
func Sum(header string, es []Entry) string {
	h := sha256.Sum256([]byte(Canonical(header, es)))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Digest lists dir and sums it.
func Digest(dir, header string, o Options) (string, error) {
	es, err := List(dir, o)
	if err != nil {
		return "", err
	}
	return Sum(header, es), nil
}
