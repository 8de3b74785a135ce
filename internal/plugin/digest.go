package plugin

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
	"strings"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// SignatureName is the SSH signature of a plugin's digest in its folder;
// the digest leaves it out.
const SignatureName = "fluffy-plugin.sig"

// Limits of a plugin folder the digest reads: a bigger one is refused
// rather than hashed for minutes.
const (
	MaxFiles = 20000
	MaxBytes = 1 << 30
)

// ErrFolder is matched by the errors of a folder Digest refuses: a
// special file, too many files or bytes.
var ErrFolder = errors.New("plugin: folder refused")

// digestHeader starts the canonical listing; a new encoding gets a new one.
const digestHeader = "fluffy-plugin-digest v1\n"

// Digest is "sha256:<hex>" of a plugin folder's canonical listing: every
// entry below dir in byte order of its slash-separated path, one line
// each, "<type> <mode> <length>:<path> <sha256>", where type is f (file),
// d (directory) or l (symlink, hashed by its target's text), mode is 755
// for an executable file or a directory and 644 for other files (the
// executable bit is what decides; a copy under another umask is the same
// plugin), and the length prefix keeps paths with newlines unambiguous.
// The signature file and a top-level .git folder are left out (a
// checkout's own bookkeeping, never run). Sockets, devices, FIFOs and
// symlinks that point outside the folder are refused (ErrFolder).
func Digest(dir string) (string, error) {
	type entry struct{ rel, line string }
	var entries []entry
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
		if rel == ".git" && d.IsDir() {
			return filepath.SkipDir
		}
		if rel == SignatureName {
			return nil
		}
		if len(entries) >= MaxFiles {
			return fmt.Errorf("%w: more than %d files", ErrFolder, MaxFiles)
		}
		var kind, mode, sum string
		switch t := d.Type(); {
		case t.IsDir():
			kind, mode, sum = "d", "755", strings.Repeat("0", 64)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			// What a link outside the folder points at could change
			// without changing the digest.
			if to := path.Join(path.Dir(rel), filepath.ToSlash(target)); filepath.IsAbs(target) || to == ".." || strings.HasPrefix(to, "../") {
				return fmt.Errorf("%w: %s links outside the folder (%s)", ErrFolder, rel, target)
			}
			h := sha256.Sum256([]byte(target))
			kind, mode, sum = "l", "777", hex.EncodeToString(h[:])
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if total += info.Size(); total > MaxBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrFolder, MaxBytes)
			}
			if sum, err = fileSum(p); err != nil {
				return err
			}
			kind, mode = "f", "644"
			if info.Mode().Perm()&0o111 != 0 {
				mode = "755"
			}
		default:
			return fmt.Errorf("%w: %s is a %s", ErrFolder, rel, t.Type())
		}
		entries = append(entries, entry{rel, fmt.Sprintf("%s %s %d:%s %s\n", kind, mode, len(rel), rel, sum)})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("plugin: digest of %s: %w", dir, err)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	h := sha256.New()
	io.WriteString(h, digestHeader)
	for _, e := range entries {
		io.WriteString(h, e.line)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func fileSum(p string) (string, error) {
	// Not following a link, and not waiting on a FIFO put in the
	// file's place since the walk saw it.
	f, err := regfile.Open(p, true)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ErrDigestChanged is returned by Verify when a folder is no longer what
// was approved.
var ErrDigestChanged = errors.New("plugin: files changed since approval")

// Verify checks dir still has the approved digest; the runtime calls it
// before each start. The error wraps ErrDigestChanged, naming both.
func Verify(dir, approved string) error {
	d, err := Digest(dir)
	if err != nil {
		return err
	}
	if d != approved {
		return fmt.Errorf("%w: %s was %s, is %s", ErrDigestChanged, dir, approved, d)
	}
	return nil
}

// ReadManifest reads and parses dir's fluffy-plugin.yaml: a regular file
// (a FIFO is refused, not waited on) inside dir (a symlink may not lead
// out of it), at most MaxManifest bytes.
func ReadManifest(dir string) (Manifest, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("plugin: %w", err)
	}
	defer root.Close()
	file := filepath.Join(dir, ManifestName)
	data, err := regfile.ReadFileIn(root, ManifestName, MaxManifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("plugin: %s: %w", file, err)
	}
	return ParseManifest(data, file)
}
