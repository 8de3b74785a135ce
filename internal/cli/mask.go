package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// sandboxMasks returns the read-only mounts that hide, from a sandbox over
// the workspace ws, each of fluffy's own files (protected: the data
// directory with its keys, configuration, policy, binaries) that lies
// inside ws: an empty directory over a directory, an empty file over a
// file. A workspace that is the home directory holds the data directory;
// a repository built with 'make build' holds the binaries. The empty
// sources live in the data directory (never in a shared /tmp another
// user could fill). Paths that do not exist are not masked: a sandbox
// may create them in its change set, and no apply writes them.
func (a *App) sandboxMasks(ws string) ([]sandbox.Mount, error) {
	if ws == "" {
		return nil, nil
	}
	cws, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return nil, fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	prot, err := a.protected(cws)
	if err != nil {
		return nil, err
	}
	var inside []string
	for _, p := range append(append([]string(nil), prot.Paths...), prot.Secret...) {
		if p == cws || strings.HasPrefix(cws, p+"/") {
			// A sandbox over fluffy's own directory would see all of it.
			return nil, fmt.Errorf("%w: the workspace %s is inside fluffy's own files (%s); run in another directory", errUsage, ws, p)
		}
		if strings.HasPrefix(p, cws+"/") {
			inside = append(inside, p)
		}
	}
	if len(inside) == 0 {
		return nil, nil
	}
	slices.Sort(inside)
	var masks []sandbox.Mount
	var dir, file string
	covered := func(p string) bool {
		for _, m := range masks {
			if strings.HasPrefix(p, m.Target+"/") || p == m.Target {
				return true
			}
		}
		return false
	}
	for _, p := range inside {
		if covered(p) {
			continue // below a masked directory already
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// Absent, or a symlink (its target, when inside, is listed
			// in its canonical form).
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
		}
		if dir == "" {
			if dir, file, err = a.maskSources(); err != nil {
				return nil, err
			}
		}
		src := file
		if fi.IsDir() {
			src = dir
		}
		masks = append(masks, sandbox.Mount{Source: src, Target: p})
	}
	return masks, nil
}

// maskSources returns an empty directory and an empty file in the data
// directory, read-only, created if missing.
func (a *App) maskSources() (string, string, error) {
	l, err := a.Config()
	if err != nil {
		return "", "", err
	}
	dd, err := datadir.New(l.Config.Home)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := dd.Ensure(); err != nil {
		return "", "", err
	}
	root := dd.Path("mask")
	dir, file := filepath.Join(root, "empty"), filepath.Join(root, "empty-file")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	if err := os.WriteFile(file, nil, 0o400); err != nil && !errors.Is(err, fs.ErrPermission) {
		return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	// Empty, whatever happened before: a mask that shows something
	// hides nothing.
	for _, p := range []string{dir, file} {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
		}
		if fi.IsDir() {
			names, err := os.ReadDir(p)
			if err != nil || len(names) > 0 {
				return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %s is not an empty directory; remove it", p)
			}
		} else if !fi.Mode().IsRegular() || fi.Size() != 0 {
			return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %s is not an empty file; remove it", p)
		}
	}
	return dir, file, nil
}
