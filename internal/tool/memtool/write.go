package memtool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/memory"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// The tags memory.write's operations carry, for policy rules: every call
// is tagged TagMemory, a daily-log append also TagMemoryAppend (the one
// kind of memory write the user may let through unasked: docs/memory.md).
const (
	TagMemory       = policy.TagMemory
	TagMemoryAppend = "memory.append"
)

// ErrWriteOutsideMemory is the refusal of a memory.write whose file is
// not a memory file of the session's workspace (after resolving symbolic
// links).
var ErrWriteOutsideMemory = errors.New("memory.write writes the memory files only (MEMORY.md and memory/**/*.md of the assistant workspace)")

// maxMemoryWrite bounds one call's text; a memory file is read whole to
// be edited, up to the index's own cap.
const (
	maxMemoryWrite = 64 << 10
	maxMemoryFile  = 8 << 20
)

// WriteIn is memory.write's input: append, or path with old and new.
type WriteIn struct {
	Append string `json:"append,omitempty" jsonschema:"text to add at the end of today's daily log (memory/YYYY-MM-DD.md); use it for facts and events worth remembering"`
	Path   string `json:"path,omitempty" jsonschema:"instead of append: the memory file to edit, MEMORY.md or memory/....md"`
	Old    string `json:"old,omitempty" jsonschema:"with path: the exact text to replace, which must occur exactly once; empty adds new at the end of the file, creating it"`
	New    string `json:"new,omitempty" jsonschema:"with path: the replacement text"`

	// rel is the file the call writes, relative to the workspace, fixed
	// at normalization (an append's day is the day it was asked).
	rel string
	// before and after are the file's content without and with the
	// write, computed once for the preview and the write.
	before, after []byte
	planned       bool
}

func writeTool(o Options) (*tool.Tool, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	w := &writer{cs: o.ChangeSet, now: now}
	return tool.New(tool.Definition[WriteIn]{
		Name: "memory.write",
		Description: "Write to the person's memory: append (a fact or event, added to today's daily log) or path with old/new (an edit of MEMORY.md or a memory/ note, old replaced once; empty old adds at the end). " +
			"The write goes to your change set and the person is shown the diff; write what is worth remembering in later conversations, plainly.",
		Action:    operation.Write,
		Tags:      []string{tool.TagWrites, TagMemory},
		Execution: tool.Execution{Class: tool.Kernel},
		Normalize: func(_ context.Context, r *tool.Resolver, in *WriteIn, op *operation.Operation) error {
			if err := w.target(r, in); err != nil {
				return err
			}
			if in.Append != "" {
				op.Tags = append(op.Tags, TagMemoryAppend)
				op.Size = int64(len(in.Append))
			} else {
				op.Size = int64(len(in.New))
			}
			p, err := r.Resolve(in.rel)
			if err != nil {
				return err
			}
			op.Paths = append(op.Paths, p)
			return nil
		},
		Preview: func(_ context.Context, in *WriteIn) string {
			if err := w.plan(in); err != nil {
				return ""
			}
			return unifiedDiff(in.rel, in.before, in.after)
		},
		Run: func(_ context.Context, in *WriteIn) (tool.Result, error) {
			if err := w.plan(in); err != nil {
				return tool.Result{Output: []byte("memory.write: " + err.Error()), IsError: true}, nil
			}
			if err := w.put(in.rel, in.after); err != nil {
				return tool.Result{Output: []byte("memory.write: " + err.Error()), IsError: true}, nil
			}
			verb := "edited"
			if in.Append != "" {
				verb = "appended to"
			}
			return tool.Result{Output: fmt.Appendf(nil, "%s %s in the change set (%d bytes); the person applies it to the memory files", verb, in.rel, len(in.after)-len(in.before))}, nil
		},
	})
}

// writer holds what memory.write needs: the session's change set and the
// kernel's clock.
type writer struct {
	cs  *changeset.ChangeSet
	now func() time.Time
}

// target decides the file a call writes, and refuses one that is not a
// memory file of the workspace: lexically first (../, absolute paths,
// SOUL.md), then once symbolic links are resolved through the change
// set's view (memory/x.md -> ../SOUL.md), so what is approved is the file
// written.
func (w *writer) target(r *tool.Resolver, in *WriteIn) error {
	switch {
	case in.Append != "" && (in.Path != "" || in.Old != "" || in.New != ""):
		return errors.New("give either append, or path with old/new, not both")
	case in.Append == "" && in.Path == "":
		return errors.New("give append (today's daily log) or path (a memory file to edit)")
	case in.Append == "" && in.Old == "" && in.New == "":
		return errors.New("an edit needs new (and old, the text it replaces)")
	case len(in.Append) > maxMemoryWrite || len(in.New) > maxMemoryWrite || len(in.Old) > maxMemoryWrite:
		return fmt.Errorf("a memory write takes at most %d KiB of text", maxMemoryWrite>>10)
	}
	rel := in.Path
	if in.Append != "" {
		rel = memory.Dir + "/" + w.now().Format(time.DateOnly) + ".md"
	}
	if !memory.IsMemoryPath(rel) {
		return fmt.Errorf("%q: %w", in.Path, ErrWriteOutsideMemory)
	}
	if r == nil {
		return errors.New("memory.write: no resolver")
	}
	p, err := r.Resolve(rel)
	if err != nil {
		return err
	}
	got, ok := r.Rel(p)
	if !ok || filepath.ToSlash(got) != rel {
		return fmt.Errorf("%q resolves to %s: %w", rel, p.Abs, ErrWriteOutsideMemory)
	}
	in.rel = rel
	return nil
}

// plan computes the file's content before and after the write, once.
func (w *writer) plan(in *WriteIn) error {
	if in.planned {
		return nil
	}
	if in.rel == "" {
		return errors.New("the call was not normalized")
	}
	before, err := w.read(in.rel)
	if err != nil {
		return err
	}
	var after string
	switch {
	case in.Append != "":
		after = appendEntry(string(before), in.rel, in.Append)
	case in.Old == "":
		after = appendEntry(string(before), "", in.New)
	default:
		switch n := strings.Count(string(before), in.Old); n {
		case 1:
			after = strings.Replace(string(before), in.Old, in.New, 1)
		case 0:
			return fmt.Errorf("old does not occur in %s; read it with memory.get and copy the text exactly", in.rel)
		default:
			return fmt.Errorf("old occurs %d times in %s; include surrounding text so it occurs once", n, in.rel)
		}
	}
	in.before, in.after, in.planned = before, []byte(after), true
	return nil
}

// read returns a memory file's content in the change set's view, nil for
// a file that does not exist yet.
func (w *writer) read(rel string) ([]byte, error) {
	e, err := w.cs.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !e.Mode.IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: %w", rel, ErrWriteOutsideMemory)
	}
	if e.Size > maxMemoryFile {
		return nil, fmt.Errorf("%s is larger than %d MiB; split it before writing to it", rel, maxMemoryFile>>20)
	}
	return w.cs.ReadFile(rel)
}

// put writes rel into the change set, creating memory/ and its
// sub-directories, keeping an existing file's mode.
func (w *writer) put(rel string, data []byte) error {
	perm := fs.FileMode(0o644)
	if e, err := w.cs.Stat(rel); err == nil {
		perm = e.Mode.Perm()
	}
	if dir := path.Dir(rel); dir != "." {
		if err := w.cs.MkdirAll(dir); err != nil {
			return err
		}
	}
	return w.cs.WriteFile(rel, data, perm)
}

// appendEntry adds text as a paragraph of its own at the end of a file's
// content; a daily log that does not exist yet starts with its day as
// heading.
func appendEntry(before, rel, text string) string {
	text = strings.TrimRight(text, "\n") + "\n"
	switch {
	case before == "" && rel != "":
		return "# " + strings.TrimSuffix(path.Base(rel), ".md") + "\n\n" + text
	case before == "":
		return text
	case strings.HasSuffix(before, "\n\n"):
		return before + text
	case strings.HasSuffix(before, "\n"):
		return before + "\n" + text
	}
	return before + "\n\n" + text
}
