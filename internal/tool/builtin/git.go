package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/gitview"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// GitOptions configure the git tools.
type GitOptions struct {
	// AuthorName and AuthorEmail sign git.commit's commits (author and
	// committer); defaults "fluffy" and "fluffy@localhost".
	AuthorName, AuthorEmail string
}

// TagGit marks the git tools.
const TagGit = "git"

// GitStatusIn is git.status's input.
type GitStatusIn struct {
	Path string `json:"path,omitempty" jsonschema:"only entries at or below this path; default the whole repository"`
}

// GitDiffIn is git.diff's input.
type GitDiffIn struct {
	Base    string   `json:"base,omitempty" jsonschema:"revision to compare against (HEAD, a branch, a tag, a hash, HEAD~2); default HEAD"`
	Target  string   `json:"target,omitempty" jsonschema:"a second revision: show the changes from base to target between two commits"`
	Staged  bool     `json:"staged,omitempty" jsonschema:"compare the index (what git.commit with paths would record) instead of the working tree"`
	Paths   []string `json:"paths,omitempty" jsonschema:"only files at or below these paths"`
	Stat    bool     `json:"stat,omitempty" jsonschema:"show a diffstat (files and changed line counts) instead of the patch"`
	Context int      `json:"context,omitempty" jsonschema:"lines of context around each change; default 3"`
}

// GitLogIn is git.log's input.
type GitLogIn struct {
	N        int    `json:"n,omitempty" jsonschema:"how many commits to show; default 10, at most 200"`
	Path     string `json:"path,omitempty" jsonschema:"only commits that changed this file or directory"`
	Revision string `json:"revision,omitempty" jsonschema:"where to start; default HEAD"`
	Format   string `json:"format,omitempty" jsonschema:"oneline (default: hash date author subject) or full (whole message)"`
}

// GitCommitIn is git.commit's input.
type GitCommitIn struct {
	Message string   `json:"message" jsonschema:"the commit message: a short subject line, optionally a blank line and a body"`
	Paths   []string `json:"paths,omitempty" jsonschema:"stage only these files or directories; default every change (new files included, ignored files excluded)"`
}

// gitRepo opens the session's repository through the change set.
func (b *builtins) gitRepo(ctx context.Context) (*gitview.Repo, error) {
	r, err := gitview.Open(ctx, b.o.ChangeSet)
	if errors.Is(err, gitview.ErrNoRepository) {
		return nil, errors.New("the workspace is not a git repository (no .git directory at its root)")
	}
	return r, err
}

// gitPaths normalizes a list of paths (default the workspace root).
func (b *builtins) gitPaths(paths []string, op *operation.Operation) error {
	if len(paths) == 0 {
		return b.insidePath(".", op)
	}
	if len(paths) > 100 {
		return errors.New("at most 100 paths")
	}
	for _, p := range paths {
		if err := b.insidePath(p, op); err != nil {
			return err
		}
	}
	return nil
}

// gitRels maps paths to workspace-relative ones.
func (b *builtins) gitRels(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		r, err := b.rel(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// withRepo opens the repository through the change set, maps paths to
// workspace-relative ones and runs fn; its error is the model's tool
// error, its text the output.
func (b *builtins) withRepo(ctx context.Context, paths []string, fn func(r *gitview.Repo, rels []string) (string, error)) (tool.Result, error) {
	if err := ctx.Err(); err != nil {
		return tool.Result{}, fmt.Errorf("git: %w", err)
	}
	r, err := b.gitRepo(ctx)
	if err != nil {
		return errResult(err), nil
	}
	defer r.Close()
	rels, err := b.gitRels(paths)
	if err != nil {
		return errResult(err), nil
	}
	out, err := fn(r, rels)
	if ctx.Err() != nil {
		// Cancelled: a partial walk is not the answer.
		return tool.Result{}, fmt.Errorf("git: %w", ctx.Err())
	}
	if err != nil {
		return errResult(err), nil
	}
	return tool.Result{Output: []byte(out)}, nil
}

func (b *builtins) gitStatus() (*tool.Tool, error) {
	return tool.New(tool.Definition[GitStatusIn]{
		Name:        "git.status",
		Description: "Show the git status of the workspace, with your pending edits: a '## branch' line, then 'XY path' per changed file (X staged, Y working tree; M modified, A added, D deleted, ?? untracked). Ignored files are not listed.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads, TagGit},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GitStatusIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *GitStatusIn) (tool.Result, error) {
			return b.withRepo(ctx, []string{orDot(in.Path)}, func(r *gitview.Repo, rel []string) (string, error) {
				return r.Status(ctx, gitview.StatusOptions{Path: rel[0]})
			})
		},
	})
}

func (b *builtins) gitDiff() (*tool.Tool, error) {
	return tool.New(tool.Definition[GitDiffIn]{
		Name:        "git.diff",
		Description: "Show a unified diff of the workspace against HEAD (or base), with your pending edits; or, with staged, of the index; or, with target, between two commits. stat gives a diffstat; paths narrows it. Binary and very large files are summarised. Untracked files are not included (git.status lists them).",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads, TagGit},
		Execution:   tool.Execution{Class: tool.FastPath},
		Refine: func(s *jsonschema.Schema) error {
			zero, most := 0.0, 100.0
			s.Properties["context"].Minimum, s.Properties["context"].Maximum = &zero, &most
			return nil
		},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GitDiffIn, op *operation.Operation) error {
			return b.gitPaths(in.Paths, op)
		},
		Run: func(ctx context.Context, in *GitDiffIn) (tool.Result, error) {
			return b.withRepo(ctx, in.Paths, func(r *gitview.Repo, paths []string) (string, error) {
				return r.Diff(ctx, gitview.DiffOptions{Base: in.Base, Target: in.Target, Staged: in.Staged, Paths: paths, Stat: in.Stat, Context: in.Context})
			})
		},
	})
}

func (b *builtins) gitLog() (*tool.Tool, error) {
	return tool.New(tool.Definition[GitLogIn]{
		Name:        "git.log",
		Description: "Show the commit history, newest first (your own git.commit commits included): one line per commit (hash date author subject) or, with format full, the whole messages. n commits (default 10), optionally only those that changed path.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads, TagGit},
		Execution:   tool.Execution{Class: tool.FastPath},
		Refine: func(s *jsonschema.Schema) error {
			zero, most := 0.0, 200.0
			s.Properties["n"].Minimum, s.Properties["n"].Maximum = &zero, &most
			s.Properties["format"].Enum = []any{"oneline", "full"}
			return nil
		},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GitLogIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *GitLogIn) (tool.Result, error) {
			return b.withRepo(ctx, []string{orDot(in.Path)}, func(r *gitview.Repo, rel []string) (string, error) {
				return r.Log(ctx, gitview.LogOptions{Revision: in.Revision, N: in.N, Path: rel[0], Full: in.Format == "full"})
			})
		},
	})
}

func (b *builtins) gitCommit() (*tool.Tool, error) {
	return tool.New(tool.Definition[GitCommitIn]{
		Name:        "git.commit",
		Description: "Commit changes to the current branch: every change by default (new files included, ignored files excluded), or only paths. The commit is recorded in your change set, like your file edits: the user's repository gets it when they apply the change set. No git hooks run.",
		Action:      operation.Write,
		Tags:        []string{tool.TagWrites, TagGit},
		Execution:   tool.Execution{Class: tool.Kernel},
		Refine: func(s *jsonschema.Schema) error {
			one := 1
			s.Properties["message"].MinLength = &one
			return nil
		},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GitCommitIn, op *operation.Operation) error {
			if strings.TrimSpace(in.Message) == "" {
				return errors.New("the commit message is empty")
			}
			if len(in.Paths) > 100 {
				return errors.New("at most 100 paths")
			}
			for _, p := range in.Paths {
				var tmp operation.Operation
				if err := b.insidePath(p, &tmp); err != nil {
					return err
				}
			}
			op.Size = int64(len(in.Message))
			// What the commit writes: the repository's .git (objects,
			// index, the branch's ref), in the change set.
			return b.onePath(".git", op)
		},
		Run: func(ctx context.Context, in *GitCommitIn) (tool.Result, error) {
			name, email := b.o.Git.AuthorName, b.o.Git.AuthorEmail
			if name == "" {
				name = "fluffy"
			}
			if email == "" {
				email = "fluffy@localhost"
			}
			return b.withRepo(ctx, in.Paths, func(r *gitview.Repo, paths []string) (string, error) {
				out, err := r.Commit(ctx, gitview.CommitOptions{Message: in.Message, Paths: paths, Author: name, Email: email})
				if errors.Is(err, gitview.ErrNothingToCommit) {
					return "", errors.New("nothing to commit: no change is staged or pending")
				}
				if err != nil {
					return "", err
				}
				return out + "(recorded in the change set; the user's repository gets the commit when the change set is applied)\n", nil
			})
		},
	})
}
