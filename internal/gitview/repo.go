package gitview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// Errors callers branch on.
var (
	// ErrNoRepository: the workspace root has no .git directory in the
	// session's view.
	ErrNoRepository = errors.New("gitview: the workspace is not a git repository (no .git directory at its root)")
	// ErrUnsupported: the repository uses something this package does
	// not read (a .git file of a linked worktree or submodule, a symlinked
	// .git).
	ErrUnsupported = errors.New("gitview: unsupported repository layout")
	// ErrInternal: the git library failed unexpectedly (a panic on
	// malformed repository data, recovered).
	ErrInternal = errors.New("gitview: the repository could not be read")
)

// Repo is the git repository at a change set's workspace root, read and
// written through the change set's merged view. Open one per call; a Repo
// is not safe for concurrent use.
type Repo struct {
	roots *roots // the layers' O_PATH descriptors; Close closes them
	cs    *changeset.ChangeSet
	r     *git.Repository
	wt    *git.Worktree
	wf    *FS
}

// Open opens the repository at the root of cs's workspace. Object
// alternates (objects/info/alternates) are never followed: they would
// name directories outside the view. Every file operation of the Repo
// fails once ctx is done, which stops the git library's walks.
func Open(ctx context.Context, cs *changeset.ChangeSet) (repo *Repo, err error) {
	defer guard(&err)
	e, err := cs.Stat(".git")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, ErrNoRepository
	case err != nil:
		return nil, err
	case e.Kind == changeset.KindFile:
		return nil, fmt.Errorf("%w: .git is a file (a linked worktree or a submodule): only a .git directory at the workspace root is read", ErrUnsupported)
	case e.Kind != changeset.KindDir:
		return nil, fmt.Errorf("%w: .git is a %s", ErrUnsupported, e.Kind)
	}
	dot, err := NewFS(cs, ".git")
	if err != nil {
		return nil, err
	}
	wf, err := NewFS(cs, ".")
	if err != nil {
		return nil, err
	}
	dot.ctx, wf.ctx = ctx, ctx
	rs, err := openRoots(cs)
	if err != nil {
		return nil, err
	}
	defer func() {
		if repo == nil {
			rs.close()
		}
	}()
	dot.roots, wf.roots = rs, rs
	st := filesystem.NewStorageWithOptions(dot, cache.NewObjectLRUDefault(), filesystem.Options{AlternatesFS: memfs.New()})
	r, err := git.Open(st, wf)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, ErrNoRepository
	}
	if err != nil {
		return nil, fmt.Errorf("gitview: open: %w", err)
	}
	wt, err := r.Worktree()
	if err != nil {
		return nil, fmt.Errorf("gitview: %w", err)
	}
	return &Repo{roots: rs, cs: cs, r: r, wt: wt, wf: wf}, nil
}

// prepareWalk makes the working tree's view skip ignored directories
// that hold nothing tracked, before the git library walks it.
func (r *Repo) prepareWalk() error {
	if r.wf.skipDir != nil {
		return nil
	}
	skip, err := r.ignoredDirs()
	if err != nil {
		return err
	}
	r.wf.skipDir = skip
	return nil
}

// Close releases the Repo's descriptors.
func (r *Repo) Close() error { return r.roots.close() }

func openRoots(cs *changeset.ChangeSet) (*roots, error) {
	lo, err := unix.Open(cs.Workspace(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gitview: open %s: %w", cs.Workspace(), err)
	}
	up, err := unix.Open(cs.UpperDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(lo)
		return nil, fmt.Errorf("gitview: open %s: %w", cs.UpperDir(), err)
	}
	return &roots{lower: lo, upper: up}, nil
}

func (r *roots) close() error {
	return errors.Join(unix.Close(r.lower), unix.Close(r.upper))
}

// guard turns a panic of the git library (malformed objects, packs or
// index in an untrusted repository) into ErrInternal.
func guard(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrInternal, p)
	}
}

// head describes HEAD: the branch name ("" when detached), the commit
// (nil before the first commit).
func (r *Repo) head() (branch string, c *object.Commit, err error) {
	ref, err := r.r.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return "", nil, fmt.Errorf("gitview: HEAD: %w", err)
	}
	if ref.Type() == plumbing.SymbolicReference {
		branch = ref.Target().Short()
	}
	h, err := r.r.Head()
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return branch, nil, nil
	}
	if err != nil {
		return branch, nil, fmt.Errorf("gitview: HEAD: %w", err)
	}
	c, err = r.r.CommitObject(h.Hash())
	if err != nil {
		return branch, nil, fmt.Errorf("gitview: HEAD commit: %w", err)
	}
	return branch, c, nil
}

// commit resolves a revision (HEAD, a branch, a tag, a hash, HEAD~2).
func (r *Repo) commit(rev string) (*object.Commit, error) {
	if rev == "" {
		rev = "HEAD"
	}
	if strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, " \t\n\x00") {
		return nil, fmt.Errorf("gitview: bad revision %q", rev)
	}
	h, err := r.r.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("gitview: unknown revision %q: %w", rev, err)
	}
	c, err := r.r.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("gitview: %s is not a commit: %w", rev, err)
	}
	return c, nil
}

// side is one side of a file's diff.
type side struct {
	exists bool
	mode   filemode.FileMode
	data   []byte
	size   int64
	hash   plumbing.Hash
}

// maxDiffSide caps a file's side for a text diff; larger files are
// summarised by size.
const maxDiffSide = 1 << 20

// blobSide reads a blob of a tree entry.
func (r *Repo) blobSide(h plumbing.Hash, mode filemode.FileMode) (side, error) {
	s := side{exists: true, mode: mode, hash: h}
	if mode == filemode.Submodule {
		s.data = []byte("Subproject commit " + h.String() + "\n")
		s.size = int64(len(s.data))
		return s, nil
	}
	b, err := r.r.BlobObject(h)
	if err != nil {
		return s, fmt.Errorf("gitview: blob %s: %w", h, err)
	}
	s.size = b.Size
	if b.Size > maxDiffSide {
		return s, nil
	}
	rd, err := b.Reader()
	if err != nil {
		return s, err
	}
	defer rd.Close()
	s.data, err = io.ReadAll(io.LimitReader(rd, maxDiffSide+1))
	return s, err
}

// treeSide reads path from a commit's tree (absent: exists false).
func (r *Repo) treeSide(t *object.Tree, p string) (side, error) {
	if t == nil {
		return side{}, nil
	}
	e, err := t.FindEntry(p)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return side{}, nil
	}
	if err != nil {
		return side{}, err
	}
	if !e.Mode.IsFile() && e.Mode != filemode.Submodule {
		return side{}, nil
	}
	return r.blobSide(e.Hash, e.Mode)
}

// worktreeSide reads path from the merged view.
func (r *Repo) worktreeSide(p string) (side, error) {
	e, err := r.cs.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, changeset.ErrSymlink) {
		return side{}, nil
	}
	if err != nil {
		return side{}, err
	}
	s := side{exists: true, size: e.Size}
	switch e.Kind {
	case changeset.KindSymlink:
		s.mode, s.data, s.size = filemode.Symlink, []byte(e.Target), int64(len(e.Target))
	case changeset.KindFile:
		s.mode = filemode.Regular
		if e.Mode.Perm()&0o111 != 0 {
			s.mode = filemode.Executable
		}
		if e.Size <= maxDiffSide {
			if s.data, err = r.cs.ReadFile(p); err != nil {
				return s, err
			}
		}
	default:
		return side{}, nil
	}
	return s, nil
}

// indexSide reads path's staged blob.
func (r *Repo) indexSide(p string) (side, error) {
	idx, err := r.r.Storer.Index()
	if err != nil {
		return side{}, err
	}
	e, err := idx.Entry(p)
	if err != nil {
		return side{}, nil
	}
	return r.blobSide(e.Hash, e.Mode)
}
