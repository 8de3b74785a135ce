package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// ErrBadPath is wrapped by Canonicalize's errors.
var ErrBadPath = errors.New("invalid path")

// maxLinks bounds the symlinks followed while canonicalizing one path.
const maxLinks = 40

// Canonicalize returns the canonical absolute form of p: relative paths
// are taken from dir, "." and ".." and duplicate slashes are resolved, and
// every symlink along the path is followed, including the last component
// and including links that point to files that do not exist yet (a write
// through a dangling link lands at its target). It reads the file system
// but never creates anything.
func Canonicalize(p, dir string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: empty", ErrBadPath)
	}
	if strings.IndexByte(p, 0) >= 0 || strings.IndexByte(dir, 0) >= 0 {
		return "", fmt.Errorf("%w: NUL byte", ErrBadPath)
	}
	if len(p) > maxPathLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrBadPath, maxPathLen)
	}
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(dir) {
			return "", fmt.Errorf("%w: %q is relative and there is no working directory", ErrBadPath, p)
		}
		p = filepath.Join(dir, p)
	}
	links := 0
	resolved := "/"
	rest := strings.Split(filepath.Clean(p), "/")
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || isNotDir(err) {
				// The rest does not exist: nothing more to resolve.
				return filepath.Clean(filepath.Join(append([]string{next}, rest...)...)), nil
			}
			return "", fmt.Errorf("%w: %w", ErrBadPath, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("%w: too many symlinks", ErrBadPath)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrBadPath, err)
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(filepath.Clean(target), "/"), rest...)
	}
	return resolved, nil
}

func isNotDir(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory")
}

// Normalize makes op's paths canonical and fills what the engine needs
// before deciding: the workspace root, Abs and InWorkspace of each path
// (from Raw when Abs is empty), the commands of a command line or argv,
// and the canonical form of every redirection target. dir is the working
// directory relative paths start from. An error leaves op unusable: the
// caller must not decide on it (or must treat it as blocked).
func Normalize(op *operation.Operation, dir string) error {
	if ws := op.Session.Workspace; ws != "" {
		c, err := Canonicalize(ws, dir)
		if err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
		op.Session.Workspace = c
	}
	ws := op.Session.Workspace
	for i := range op.Paths {
		p := &op.Paths[i]
		raw := p.Abs
		if raw == "" {
			raw = p.Raw
		}
		c, err := Canonicalize(raw, dir)
		if err != nil {
			return fmt.Errorf("path %q: %w", raw, err)
		}
		p.Abs = c
		p.InWorkspace = ws != "" && within(c, ws)
	}
	if len(op.Commands) == 0 {
		switch {
		case op.CommandLine != "":
			op.Commands, _ = shell.Parse(op.CommandLine) // errors are Dynamic commands
		case len(op.Argv) > 0:
			op.Commands = shell.Expand(op.Argv)
		}
	}
	for i := range op.Commands {
		for j, w := range op.Commands[i].Writes {
			c, err := Canonicalize(w, dir)
			if err != nil {
				return fmt.Errorf("redirection %q: %w", w, err)
			}
			op.Commands[i].Writes[j] = c
		}
	}
	return nil
}
