package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/treedigest"
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
const digestHeader = "fluffy-plugin-digest v2\n"

// Digest is a plugin folder's pin: "sha256:<hex>" of its canonical
// listing (internal/treedigest: paths, execute bits, contents, link
// targets). Links are pinned by their target's text as long as they stay
// inside the folder (package trees are full of them); the signature file
// and a top-level .git folder are left out (a checkout's own bookkeeping,
// never run). Sockets, devices, FIFOs, links out of the folder and a
// folder over MaxFiles or MaxBytes are refused (ErrFolder).
func Digest(dir string) (string, error) {
	d, err := treedigest.Digest(dir, digestHeader, treedigest.Options{
		Skip: func(rel string, isDir bool) bool {
			return (isDir && rel == ".git") || (!isDir && rel == SignatureName)
		},
		Links: treedigest.LinksInside, MaxFiles: MaxFiles, MaxBytes: MaxBytes})
	if errors.Is(err, treedigest.ErrUnsupported) || errors.Is(err, treedigest.ErrTooBig) {
		err = fmt.Errorf("%w: %w", ErrFolder, err)
	}
	if err != nil {
		return "", fmt.Errorf("plugin: digest of %s: %w", dir, err)
	}
	return d, nil
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
