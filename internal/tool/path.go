package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Path errors; the model sees them as tool results.
var (
	ErrPathInvalid = errors.New("invalid path")
	ErrPathLoop    = errors.New("too many levels of symbolic links")
	// ErrOutsideWorkspace: a tool that works only in the workspace was
	// given a path that resolves outside it.
	ErrOutsideWorkspace = errors.New("outside the workspace")
)

// Limits of the paths a model may write, those of Linux.
const (
	maxPathBytes = 4096 // PATH_MAX
	maxNameBytes = 255  // NAME_MAX
	maxLinks     = 40   // the kernel's MAXSYMLINKS
)

// LinkFS is what the Resolver reads symlinks through: the real file
// system by default, or a session's merged change-set view. Both methods
// take absolute paths and must not follow a final symlink.
type LinkFS interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
}

// StepLinkFS is an optional extension of LinkFS for file systems where a
// lookup walks from the root (a change set's merged view): LstatStep is
// Lstat(filepath.Join(dir, name)) given what the previous step returned
// for dir (dirState, or nil when unknown), so the Resolver walks each
// component once instead of re-walking every prefix. It must answer
// exactly as Lstat would; the state is only reused within one Resolve.
type StepLinkFS interface {
	LinkFS
	LstatStep(dir string, dirState any, name string) (fs.FileInfo, any, error)
}

// PathLinkFS is an optional extension of LinkFS for file systems where
// a whole path can be looked up at once more cheaply than component by
// component (a change set's merged view: one openat2 instead of several
// system calls per component and layer). PlainPath reports whether
// dir + "/" + names[0] + "/" + ... names an existing directory or
// regular file reached through directories only: no component is a
// symbolic link, none is "", "." or "..", and the merged view has no
// whiteout, opaque directory or other special entry on the way. dir is
// absolute and canonical. When it answers true the Resolver takes the
// joined path as resolved; when false (or in doubt) the Resolver walks
// component by component, so false is always a safe answer.
type PathLinkFS interface {
	LinkFS
	PlainPath(dir string, names []string) bool
}

type osLinks struct{}

func (osLinks) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }
func (osLinks) Readlink(name string) (string, error)   { return os.Readlink(name) }

// Resolver turns the paths a model writes into canonical
// operation.Paths: absolute, cleaned, symlinks resolved as far as the
// path exists, and the inside-workspace flag computed on the resolved
// form. It never opens a file. Safe for concurrent use.
type Resolver struct {
	workspace string
	cwd       string
	fs        LinkFS
}

// ResolverOptions configure a Resolver.
type ResolverOptions struct {
	// Workspace is the workspace root; required. It is canonicalized.
	Workspace string
	// Cwd is where relative paths start; default the workspace.
	Cwd string
	// FS reads symlinks; default the real file system.
	FS LinkFS
}

// NewResolver returns a Resolver for a workspace.
func NewResolver(o ResolverOptions) (*Resolver, error) {
	if o.Workspace == "" {
		return nil, errors.New("tool: resolver needs a workspace")
	}
	ws, err := filepath.Abs(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("tool: workspace: %w", err)
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, fmt.Errorf("tool: workspace: %w", err)
	}
	r := &Resolver{workspace: ws, cwd: ws, fs: o.FS}
	if r.fs == nil {
		r.fs = osLinks{}
	}
	if o.Cwd != "" {
		p, err := r.Resolve(o.Cwd)
		if err != nil {
			return nil, fmt.Errorf("tool: cwd: %w", err)
		}
		r.cwd = p.Abs
	}
	return r, nil
}

// Workspace returns the canonical workspace root.
func (r *Resolver) Workspace() string { return r.workspace }

// Resolve canonicalizes raw. Components that exist are resolved through
// their symlinks (a ".." after a symlink climbs from the link's target, as
// the kernel does); the part that does not exist yet is cleaned
// lexically.
func (r *Resolver) Resolve(raw string) (operation.Path, error) {
	bad := func(why string) (operation.Path, error) {
		return operation.Path{}, fmt.Errorf("%w %q: %s", ErrPathInvalid, truncate(raw, 80), why)
	}
	switch {
	case raw == "":
		return bad("empty")
	case strings.IndexByte(raw, 0) >= 0:
		return bad("contains a NUL byte")
	case len(raw) > maxPathBytes:
		return bad(fmt.Sprintf("longer than %d bytes", maxPathBytes))
	}
	// Start from a directory known to be canonical: the working directory
	// for a relative path, the workspace when an absolute path is in it,
	// the root otherwise.
	resolved, rest := "/", raw
	switch {
	case !filepath.IsAbs(raw):
		resolved = r.cwd
	case under(raw, r.workspace):
		resolved, rest = r.workspace, raw[len(r.workspace):]
	}
	todo := strings.Split(rest, "/")
	for _, c := range todo {
		if len(c) > maxNameBytes {
			return bad(fmt.Sprintf("a component is longer than %d bytes", maxNameBytes))
		}
	}
	if p, ok := r.plain(resolved, todo); ok {
		return operation.Path{Abs: p, Raw: raw, InWorkspace: r.inside(p)}, nil
	}
	links := 0
	step, _ := r.fs.(StepLinkFS)
	var state any // step's state for resolved, nil when unknown
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			state = nil
			continue
		}
		// resolved is clean and absolute, c one component other than
		// "", "." and "..": joining them needs no cleaning.
		next := resolved + "/" + c
		if resolved == "/" {
			next = "/" + c
		}
		var fi fs.FileInfo
		var err error
		var nextState any
		if step != nil {
			fi, nextState, err = step.LstatStep(resolved, state, c)
		} else {
			fi, err = r.fs.Lstat(next)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			// Fail closed: an unreadable directory could hide a symlink.
			return operation.Path{}, fmt.Errorf("%w %q: %v", ErrPathInvalid, truncate(raw, 80), err)
		}
		if err != nil {
			// Nothing exists from here on: clean the rest lexically.
			resolved = filepath.Clean(next + "/" + strings.Join(todo, "/"))
			break
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved, state = next, nextState
			if !fi.IsDir() && len(todo) > 0 && strings.Trim(strings.Join(todo, "/"), "/") != "" {
				resolved = filepath.Clean(next + "/" + strings.Join(todo, "/"))
				break
			}
			continue
		}
		links++
		if links > maxLinks {
			return operation.Path{}, fmt.Errorf("%w: %q", ErrPathLoop, truncate(raw, 80))
		}
		target, err := r.fs.Readlink(next)
		if err != nil {
			return operation.Path{}, fmt.Errorf("%w %q: %v", ErrPathInvalid, truncate(raw, 80), err)
		}
		if filepath.IsAbs(target) {
			resolved, state = "/", nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return operation.Path{Abs: resolved, Raw: raw, InWorkspace: r.inside(resolved)}, nil
}

// plain is the whole-path shortcut (PathLinkFS): when the components of
// todo other than "" and "." contain no ".." and the file system says
// the path below dir is plain (existing, no symlink on the way), the
// walk would join them one by one and end there; plain returns that
// join. Otherwise false, and the caller walks.
func (r *Resolver) plain(dir string, todo []string) (string, bool) {
	pfs, ok := r.fs.(PathLinkFS)
	if !ok {
		return "", false
	}
	var buf [16]string
	names := buf[:0]
	n := len(dir)
	for _, c := range todo {
		switch c {
		case "", ".":
			continue
		case "..":
			return "", false
		}
		names = append(names, c)
		n += 1 + len(c)
	}
	if len(names) == 0 || !pfs.PlainPath(dir, names) {
		return "", false
	}
	var b strings.Builder
	b.Grow(n)
	if dir != "/" {
		b.WriteString(dir)
	}
	for _, c := range names {
		b.WriteByte('/')
		b.WriteString(c)
	}
	return b.String(), true
}

func (r *Resolver) inside(p string) bool {
	return p == r.workspace || under(p, r.workspace) || r.workspace == "/"
}

// under reports whether p lies below the directory dir (p starts with
// dir + "/"), without building that string.
func under(p, dir string) bool {
	return len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// Rel returns p relative to the workspace, for an inside path.
func (r *Resolver) Rel(p operation.Path) (string, bool) {
	if !p.InWorkspace {
		return "", false
	}
	rel, err := filepath.Rel(r.workspace, p.Abs)
	return filepath.ToSlash(rel), err == nil
}
