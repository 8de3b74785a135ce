// Package datadir owns the layout of fluffy's data directory ($FLUFFY_HOME):
// which files and subdirectories exist, and that all of it is private to
// the user (0700 directories). Other packages ask it for paths rather than
// joining names themselves, so the layout is written down once.
package datadir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir is a data directory.
type Dir struct {
	Root string
}

// Subdirectories created by Ensure (docs/DESIGN.md, "Storage and files").
const (
	Keys       = "keys"
	Changesets = "changesets"
	Logs       = "logs"
	Backups    = "backups"
	// Cache holds the sandboxes' persistent build caches (created on
	// first use, one directory per workspace; safe to delete).
	Cache = "cache"
)

// Files at the root.
const (
	StateDB = "fluffy.db"
	AuditDB = "audit.db"
	// KernelLock is the file a running kernel holds an exclusive flock
	// on for its whole life (internal/kernel.LockFile).
	KernelLock = "kernel.lock"
)

// New returns the data directory at root (which must be absolute).
func New(root string) (Dir, error) {
	if !filepath.IsAbs(root) {
		return Dir{}, fmt.Errorf("datadir: %q is not an absolute path", root)
	}
	return Dir{Root: filepath.Clean(root)}, nil
}

// Ensure creates the directory and its subdirectories with mode 0700, and
// tightens the mode of any that already exist with wider permissions: the
// data directory holds keys and the audit log.
func (d Dir) Ensure() error {
	for _, p := range []string{d.Root, d.Path(Keys), d.Path(Changesets), d.Path(Logs), d.Path(Backups)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("datadir: create %s: %w", p, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("datadir: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("datadir: %s is not a directory", p)
		}
		if fi.Mode().Perm() != 0o700 {
			if err := os.Chmod(p, 0o700); err != nil {
				return fmt.Errorf("datadir: restrict %s to 0700: %w", p, err)
			}
		}
	}
	return nil
}

// Path joins names under the root.
func (d Dir) Path(elem ...string) string {
	return filepath.Join(append([]string{d.Root}, elem...)...)
}
