package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

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
			return b.onePath(in.Path, op)
		},
		Run: func(_ context.Context, in *WriteIn) (tool.Result, error) {
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			if err := b.put(rel, []byte(in.Content)); err != nil {
				return errResult(err), nil
			}
			return tool.Result{Output: fmt.Appendf(nil, "wrote %s (%d bytes) to the change set", rel, len(in.Content))}, nil
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

// EditIn is fs.edit's input.
type EditIn struct {
	Path string `json:"path" jsonschema:"the file to edit, relative to the workspace root"`
	Old  string `json:"old" jsonschema:"the exact text to replace; it must occur exactly once in the file"`
	New  string `json:"new" jsonschema:"the replacement text"`
}

func (b *builtins) edit() (*tool.Tool, error) {
	return tool.New(tool.Definition[EditIn]{
		Name:        "fs.edit",
		Description: "Replace one exact occurrence of a text in a file of the workspace. The old text must occur exactly once; include surrounding lines to make it unique. The edit goes to your change set.",
		Action:      operation.Write,
		Tags:        []string{tool.TagWrites},
		Execution:   tool.Execution{Class: tool.Kernel},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *EditIn, op *operation.Operation) error {
			op.Size = int64(len(in.New))
			return b.onePath(in.Path, op)
		},
		Run: func(_ context.Context, in *EditIn) (tool.Result, error) {
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			data, err := b.o.ChangeSet.ReadFile(rel)
			if err != nil {
				return errResult(err), nil
			}
			out, err := replaceOnce(string(data), in.Old, in.New)
			if err != nil {
				return errResult(fmt.Errorf("%s: %w", rel, err)), nil
			}
			if err := b.put(rel, []byte(out)); err != nil {
				return errResult(err), nil
			}
			return tool.Result{Output: fmt.Appendf(nil, "edited %s in the change set", rel)}, nil
		},
	})
}

// replaceOnce replaces the single occurrence of old in s. When old occurs
// zero or several times the error says so and shows the nearest match.
func replaceOnce(s, old, new string) (string, error) {
	if old == "" {
		return "", errors.New("old text is empty")
	}
	switch n := strings.Count(s, old); n {
	case 1:
		return strings.Replace(s, old, new, 1), nil
	case 0:
		line, text := nearest(s, old)
		if line == 0 {
			return "", errors.New("old text not found")
		}
		return "", fmt.Errorf("old text not found; the nearest match is at line %d:\n%s", line, text)
	default:
		return "", fmt.Errorf("old text occurs %d times; include more surrounding lines so it occurs once", n)
	}
}

// nearest finds the window of lines of s most like old (by shared
// trimmed lines, then by the first line's prefix).
func nearest(s, old string) (int, string) {
	lines := strings.Split(s, "\n")
	want := strings.Split(old, "\n")
	// Fuzzy scoring costs up to 128×128 per line pair: only for small
	// searches; large ones score equal lines only, so a model cannot make
	// the kernel spin.
	fuzzy := len(lines)*len(want) <= 2000
	best, bestScore := 0, 0
	for i := range lines {
		score := 0
		for j, w := range want {
			if i+j >= len(lines) {
				break
			}
			a, b := strings.TrimSpace(lines[i+j]), strings.TrimSpace(w)
			if a == b && a != "" {
				score += 2 + len(a)
			} else if fuzzy {
				score += overlap(a, b)
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if bestScore == 0 {
		return 0, ""
	}
	end := min(best+len(want), len(lines))
	return best + 1, strings.Join(lines[best:end], "\n")
}

// overlap is the longest prefix of b found anywhere in a (each cut at
// 128 bytes to bound the work).
func overlap(a, b string) int {
	a, b = a[:min(len(a), 128)], b[:min(len(b), 128)]
	best := 0
	for i := range len(a) {
		if n := commonPrefix(a[i:], b); n > best {
			best = n
		}
	}
	return best
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
