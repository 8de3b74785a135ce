package builtin

import (
	"bytes"
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

// WriteIn is fs.write's input.
type WriteIn struct {
	Path    string `json:"path" jsonschema:"the file to create or replace, relative to the workspace root"`
	Content string `json:"content" jsonschema:"the complete new content of the file"`
}

func (b *builtins) write() (*tool.Tool, error) {
	return tool.New(tool.Definition[WriteIn]{
		Name:        "fs.write",
		Description: "Create or replace a file of the workspace with the given content. The write goes to your change set, which the user reviews before it reaches the real files.",
		Action:      operation.Write,
		Tags:        []string{tool.TagWrites},
		Execution:   tool.Execution{Class: tool.Kernel},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *WriteIn, op *operation.Operation) error {
			op.Size = int64(len(in.Content))
			if err := b.onePath(in.Path, op); err != nil {
				return err
			}
			b.tagSkillWidening(b.plannedWrite(in), op)
			return nil
		},
		Preview: func(_ context.Context, in *WriteIn) string { return b.skillWidening(b.plannedWrite(in)) },
		Run: func(_ context.Context, in *WriteIn) (tool.Result, error) {
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			if err := b.put(rel, []byte(in.Content)); err != nil {
				return errResult(err), nil
			}
			return tool.Result{Output: fmt.Appendf(nil, "wrote %s (%d bytes) to the change set", showName(rel), len(in.Content))}, nil
		},
	})
}

// put writes rel in the change set, creating its parents, keeping an
// existing file's mode.
func (b *builtins) put(rel string, data []byte) error {
	if rel == "." {
		return errors.New("the workspace root is a directory")
	}
	perm := fs.FileMode(0o644)
	if e, err := b.o.ChangeSet.Stat(rel); err == nil {
		perm = e.Mode.Perm()
	}
	if dir := path.Dir(rel); dir != "." {
		if err := b.o.ChangeSet.MkdirAll(dir); err != nil {
			return err
		}
	}
	return b.o.ChangeSet.WriteFile(rel, data, perm)
}

// EditIn is fs.edit's input: old (and new), or diff.
type EditIn struct {
	Path string `json:"path,omitempty" jsonschema:"the file to edit, relative to the workspace root; required with old/new; with diff, optional (the diff's headers name the files)"`
	Old  string `json:"old,omitempty" jsonschema:"the exact text to replace; it must occur exactly once in the file"`
	New  string `json:"new,omitempty" jsonschema:"the replacement text (empty deletes old)"`
	Diff string `json:"diff,omitempty" jsonschema:"instead of old/new: a unified diff (--- a/FILE, +++ b/FILE, @@ hunks; several files allowed, /dev/null creates or deletes one) whose context and removed lines must match the files exactly"`
}

func (b *builtins) edit() (*tool.Tool, error) {
	return tool.New(tool.Definition[EditIn]{
		Name: "fs.edit",
		Description: "Edit files of the workspace, in one of two ways. (1) path, old, new: replace the one exact occurrence of old by new; old must occur exactly once, so include surrounding lines to make it unique. " +
			"(2) diff: a unified diff (as `diff -u` or `git diff` print it) for one or more files; every hunk's context and removed lines must match the file exactly (line numbers may be a little off). " +
			"Nothing is written unless every file's edit applies. When an edit does not apply, the error names the file and line and shows the nearest match. The edit goes to your change set.",
		Action:    operation.Write,
		Tags:      []string{tool.TagWrites},
		Execution: tool.Execution{Class: tool.Kernel},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *EditIn, op *operation.Operation) error {
			defer func() { b.tagSkillWidening(b.plannedEdit(in), op) }()
			if in.Diff == "" {
				op.Size = int64(len(in.New))
				return b.onePath(in.Path, op)
			}
			op.Size = int64(len(in.Diff))
			fps, err := parsePatch(in.Diff, in.Path)
			if err != nil {
				// Decided again (and reported) by Run; the path given, if
				// any, is still judged by the gates.
				if in.Path != "" {
					return b.onePath(in.Path, op)
				}
				return err
			}
			for _, fp := range fps {
				if err := b.onePath(fp.Path, op); err != nil {
					return err
				}
			}
			return nil
		},
		Preview: func(_ context.Context, in *EditIn) string { return b.skillWidening(b.plannedEdit(in)) },
		Run: func(_ context.Context, in *EditIn) (tool.Result, error) {
			if in.Diff != "" {
				if in.Old != "" || in.New != "" {
					return errResult(errors.New("give either old/new or diff, not both")), nil
				}
				out, err := b.applyDiff(in.Path, in.Diff)
				if err != nil {
					return errResult(err), nil
				}
				return tool.Result{Output: []byte(out)}, nil
			}
			if in.Path == "" {
				return errResult(errors.New("path is required with old/new")), nil
			}
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			data, err := b.readAll("fs.edit", rel)
			if err != nil {
				return errResult(err), nil
			}
			out, err := replaceOnce(rel, string(data), in.Old, in.New)
			if err != nil {
				return errResult(err), nil
			}
			if err := b.put(rel, []byte(out)); err != nil {
				return errResult(err), nil
			}
			return tool.Result{Output: fmt.Appendf(nil, "edited %s in the change set", showName(rel))}, nil
		},
	})
}

// applyDiff applies a unified diff to the change set: every file's hunks
// are applied in memory first; nothing is written unless all apply.
func (b *builtins) applyDiff(only, diff string) (string, error) {
	fps, err := parsePatch(diff, only)
	if err != nil {
		return "", err
	}
	var onlyRel string
	if only != "" {
		if onlyRel, err = b.rel(only); err != nil {
			return "", err
		}
	}
	type result struct {
		rel     string
		data    []byte
		delete  bool
		created bool
		hunks   int
	}
	var res []result
	for _, fp := range fps {
		rel, err := b.rel(fp.Path)
		if err != nil {
			return "", err
		}
		if onlyRel != "" && rel != onlyRel {
			return "", &EditError{Path: fp.Path, Msg: fmt.Sprintf("the diff edits %s but path names %s: drop path, or diff only that file", rel, onlyRel)}
		}
		cur := ""
		e, serr := b.o.ChangeSet.Stat(rel)
		switch {
		case fp.New && serr == nil:
			return "", &EditError{Path: rel, Msg: "the diff creates this file (--- /dev/null) but it exists: diff against its content, or replace it with fs.write"}
		case fp.New && !errors.Is(serr, fs.ErrNotExist):
			return "", serr
		case !fp.New && serr != nil:
			return "", &EditError{Path: rel, Msg: fmt.Sprintf("cannot edit: %v (to create a file, use --- /dev/null)", serr)}
		case !fp.New && e.Kind != changeset.KindFile:
			return "", &EditError{Path: rel, Msg: fmt.Sprintf("is a %s, not a file", e.Kind)}
		case !fp.New:
			data, err := b.readAll("fs.edit", rel)
			if err != nil {
				return "", err
			}
			if isBinaryText(data) {
				return "", &EditError{Path: rel, Msg: "is a binary file; fs.edit edits text"}
			}
			cur = string(data)
		}
		out, err := applyHunks(rel, cur, fp.Hunks)
		if err != nil {
			return "", err
		}
		if fp.Delete && out != "" {
			return "", &EditError{Path: rel, Msg: "the diff deletes this file (+++ /dev/null) but its hunks leave lines in it: remove every line"}
		}
		res = append(res, result{rel: rel, data: []byte(out), delete: fp.Delete, created: fp.New, hunks: len(fp.Hunks)})
	}
	var msg []string
	for _, r := range res {
		switch {
		case r.delete:
			if err := b.o.ChangeSet.Remove(r.rel, false); err != nil {
				return "", fmt.Errorf("%s: %w", r.rel, err)
			}
			msg = append(msg, "deleted "+showName(r.rel))
		default:
			if err := b.put(r.rel, r.data); err != nil {
				return "", fmt.Errorf("%s: %w", r.rel, err)
			}
			verb := "edited"
			if r.created {
				verb = "created"
			}
			msg = append(msg, fmt.Sprintf("%s %s (%d hunk(s))", verb, showName(r.rel), r.hunks))
		}
	}
	return strings.Join(msg, "; ") + " in the change set", nil
}

// isBinaryText: a NUL in the first 8000 bytes, as git decides.
func isBinaryText(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}
