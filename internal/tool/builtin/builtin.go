// Package builtin owns fluffy's built-in tools: fs.read, fs.list,
// fs.exists, search.grep, search.glob, git.status, git.diff and git.log
// (fast path, reading the session's change set's merged view, so the model
// sees its own pending edits; the search tools honour .gitignore; the git
// tools use internal/gitview and never run git), git.commit (a kernel
// write of the commit into the change set), fs.write and
// fs.edit (kernel writes into the change set's upper layer, never the real
// tree), and shell.exec and test.run (in a sandbox from the code-executor
// template; test.run parses the runner's output for the TDD machine).
//
// Register adds them to a registry for one session; the router
// (internal/tool/router) runs them through the gates.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// Options configure the built-in tools of one session. ChangeSet and
// Resolver are required; the Resolver must read links through the change
// set (changeset.Links) so paths mean what the merged view shows.
type Options struct {
	ChangeSet *changeset.ChangeSet
	Resolver  *tool.Resolver
	// MaxReadBytes caps fs.read (default 256 KiB).
	MaxReadBytes int
	// MaxMatches caps search.grep (default 200).
	MaxMatches int
	// Git configures git.commit's identity.
	Git GitOptions
	// Coverage, when set, is asked at each test.run whether to measure
	// coverage (the session's TDD machine: explore mode, or tech debt
	// open); the report goes to the machine with the run's result.
	Coverage func() bool
}

// Register builds the built-in tools and adds them to reg.
func Register(reg *tool.Registry, o Options) error {
	if o.ChangeSet == nil || o.Resolver == nil {
		return errors.New("builtin: ChangeSet and Resolver are required")
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = 256 << 10
	}
	if o.MaxMatches <= 0 {
		o.MaxMatches = 200
	}
	b := &builtins{o: o}
	mk := []func() (*tool.Tool, error){b.read, b.list, b.exists, b.grep, b.glob, b.write, b.edit, b.shell, b.testRun,
		b.gitStatus, b.gitDiff, b.gitLog, b.gitCommit}
	for _, f := range mk {
		t, err := f()
		if err != nil {
			return err
		}
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	return nil
}

type builtins struct{ o Options }

// rel resolves raw and returns its workspace-relative form ("." for the
// root); paths outside the workspace are refused here (the policy gate has
// already judged them; these tools only reach the workspace's view).
func (b *builtins) rel(raw string) (string, error) {
	raw, err := nameArg(raw)
	if err != nil {
		return "", err
	}
	p, err := b.o.Resolver.Resolve(raw)
	if err != nil {
		return "", err
	}
	r, ok := b.o.Resolver.Rel(p)
	if !ok {
		return "", fmt.Errorf("%s is outside the workspace: this tool reads and writes the workspace only", raw)
	}
	if r == "" {
		r = "."
	}
	return r, nil
}

// onePath is the Normalize of tools that name one path.
func (b *builtins) onePath(raw string, op *operation.Operation) error {
	if raw == "" {
		raw = "."
	}
	raw, err := nameArg(raw)
	if err != nil {
		return err
	}
	p, err := b.o.Resolver.Resolve(raw)
	if err != nil {
		return err
	}
	op.Paths = append(op.Paths, p)
	return nil
}

// insidePath is onePath for the read tools: the path must resolve
// inside the workspace. The fast-path tools read only the workspace's
// merged view, so such a call is refused at normalization, before anyone
// is asked to approve it (tool.ErrOutsideWorkspace).
func (b *builtins) insidePath(raw string, op *operation.Operation) error {
	if err := b.onePath(raw, op); err != nil {
		return err
	}
	if p := op.Paths[len(op.Paths)-1]; !p.InWorkspace {
		return fmt.Errorf("%q resolves to %s, %w: the fs and search tools read the workspace only (a command through shell.exec can read elsewhere, with a person's approval)", raw, p.Abs, tool.ErrOutsideWorkspace)
	}
	return nil
}

// PathIn names one path.
type PathIn struct {
	Path string `json:"path" jsonschema:"a path relative to the workspace root (or absolute inside it)"`
}

func errResult(err error) tool.Result {
	return tool.Result{Output: []byte(err.Error()), IsError: true}
}

func (b *builtins) list() (*tool.Tool, error) {
	return tool.New(tool.Definition[PathIn]{
		Name:        "fs.list",
		Description: "List a directory of the workspace (with your pending edits): one entry per line, directories end with /. A name with unusual characters (control, invisible or bidirectional characters, quotes, backslashes) is shown in double quotes with them escaped, as git quotes names; pass it back exactly so, quotes included, to name that file.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *PathIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *PathIn) (tool.Result, error) {
			if err := ctx.Err(); err != nil {
				return tool.Result{}, fmt.Errorf("fs.list: %w", err)
			}
			rel, err := b.rel(orDot(in.Path))
			if err != nil {
				return errResult(err), nil
			}
			ents, err := b.o.ChangeSet.ReadDir(rel)
			if err != nil {
				return errResult(err), nil
			}
			var sb strings.Builder
			for _, e := range ents {
				sb.WriteString(showName(path.Base(e.Path)))
				switch e.Kind {
				case changeset.KindDir:
					sb.WriteByte('/')
				case changeset.KindSymlink:
					sb.WriteString(" -> " + showName(e.Target))
				}
				sb.WriteByte('\n')
			}
			return tool.Result{Output: []byte(sb.String())}, nil
		},
	})
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func (b *builtins) exists() (*tool.Tool, error) {
	return tool.New(tool.Definition[PathIn]{
		Name:        "fs.exists",
		Description: "Say whether a path exists in the workspace (with your pending edits), and what it is.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *PathIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *PathIn) (tool.Result, error) {
			if err := ctx.Err(); err != nil {
				return tool.Result{}, fmt.Errorf("fs.exists: %w", err)
			}
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			e, err := b.o.ChangeSet.Stat(rel)
			if errors.Is(err, fs.ErrNotExist) {
				return tool.Result{Output: []byte("no: " + in.Path + " does not exist")}, nil
			}
			if err != nil {
				return errResult(err), nil
			}
			if e.Kind == changeset.KindOther {
				return tool.Result{Output: fmt.Appendf(nil, "yes: %s is a special file (a FIFO, socket or device): the fs and search tools do not read it", in.Path)}, nil
			}
			return tool.Result{Output: fmt.Appendf(nil, "yes: %s is a %s of %d bytes", in.Path, e.Kind, e.Size)}, nil
		},
	})
}
