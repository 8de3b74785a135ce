package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// A confined command (a skill's run) cannot write the workspace; it
// proposes lasting writes as files in its pending folder
// (tool.Confinement.Pending, /tmp/shared/pending/ for a skill). Once it
// has ended, each regular file there is submitted as the model's own
// write tool, on the command's behalf: the same gates, approvals,
// audit entries and TDD feedback as an fs.write the model makes. What
// cannot be such a write (a link, a device, a file too big for
// fs.write or not text) is refused by name, and the folder is emptied
// so that the next run starts clean (docs/skills.md#lasting-writes).

// PendingTool is the tool a pending file is proposed through.
const PendingTool = "fs.write"

// RulePending is the rule of a pending file refused before the gates.
const RulePending = "pending-file"

// Bounds on one pending folder: files taken (the rest are refused) and
// entries walked (past it the walk stops). A file's size is bounded by
// what fs.write takes, tool.MaxArgsBytes of arguments.
const (
	maxPendingFiles   = 64
	maxPendingEntries = 1024
	maxPendingDepth   = 32
)

// pendingFile is one file found in a pending folder: its path relative
// to the folder (slash-separated) and its content, or why it is
// refused.
type pendingFile struct {
	rel  string
	data []byte
	why  string
}

// takePending reads the pending folder dir, then empties it (it is
// left an empty folder, 0700). Nothing in dir is followed: dir itself
// must be a folder (not a link), and every entry but a regular file or
// a folder is refused. A missing dir holds nothing. The error is for a
// folder that cannot be read or emptied at all.
func takePending(dir string) ([]pendingFile, error) {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	root, err := os.OpenRoot(parent)
	if err != nil {
		return nil, fmt.Errorf("pending folder: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pending folder: %w", err)
	}
	var out []pendingFile
	if fi.IsDir() {
		w := pendingWalk{root: root, base: base}
		err = w.dir("", 0)
		out = w.out
	} else {
		out = []pendingFile{{rel: ".", why: "pending/ itself is not a folder (" + kindOf(fi.Mode()) + "): nothing in it was taken"}}
	}
	if rerr := root.RemoveAll(base); rerr != nil {
		return out, fmt.Errorf("emptying the pending folder: %w", rerr)
	}
	if merr := root.Mkdir(base, 0o700); merr != nil {
		return out, fmt.Errorf("emptying the pending folder: %w", merr)
	}
	return out, err
}

// pendingWalk walks a pending folder through root, never following a
// link.
type pendingWalk struct {
	root    *os.Root
	base    string
	out     []pendingFile
	files   int
	entries int
}

func (w *pendingWalk) dir(rel string, depth int) error {
	f, err := w.root.OpenFile(path.Join(w.base, rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		if rel == "" {
			return fmt.Errorf("pending folder: %w", err)
		}
		w.out = append(w.out, pendingFile{rel: rel, why: "the folder cannot be read: " + err.Error()})
		return nil
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		w.out = append(w.out, pendingFile{rel: orDot(rel), why: "the folder cannot be read: " + err.Error()})
		return nil
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		p := path.Join(rel, e.Name())
		if w.entries++; w.entries > maxPendingEntries {
			w.out = append(w.out, pendingFile{rel: p, why: fmt.Sprintf("more than %d entries under pending/: the rest was not read", maxPendingEntries)})
			return errStopWalk
		}
		switch t := e.Type(); {
		case t.IsDir():
			if depth+1 >= maxPendingDepth {
				w.out = append(w.out, pendingFile{rel: p, why: fmt.Sprintf("nested deeper than %d folders", maxPendingDepth)})
				continue
			}
			if err := w.dir(p, depth+1); err != nil {
				return err
			}
		case t.IsRegular():
			w.out = append(w.out, w.file(p))
		default:
			w.out = append(w.out, pendingFile{rel: p, why: kindOf(t) + ": pending/ takes regular files only"})
		}
	}
	return nil
}

// errStopWalk ends a walk that read enough; it is not an error.
var errStopWalk = errors.New("stop")

// file reads one regular file, refusing what fs.write could not take.
func (w *pendingWalk) file(rel string) pendingFile {
	if w.files++; w.files > maxPendingFiles {
		return pendingFile{rel: rel, why: fmt.Sprintf("more than %d files under pending/ in one run", maxPendingFiles)}
	}
	// O_NONBLOCK: an entry swapped for a FIFO since it was listed does
	// not block the kernel; the Stat below refuses it.
	f, err := w.root.OpenFile(path.Join(w.base, rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return pendingFile{rel: rel, why: "cannot be opened: " + err.Error()}
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return pendingFile{rel: rel, why: "cannot be read: " + err.Error()}
	case !fi.Mode().IsRegular():
		return pendingFile{rel: rel, why: kindOf(fi.Mode()) + ": pending/ takes regular files only"}
	case fi.Size() > tool.MaxArgsBytes:
		return pendingFile{rel: rel, why: fmt.Sprintf("%d bytes, over the %d fs.write takes", fi.Size(), tool.MaxArgsBytes)}
	}
	data, err := io.ReadAll(io.LimitReader(f, tool.MaxArgsBytes+1))
	switch {
	case err != nil:
		return pendingFile{rel: rel, why: "cannot be read: " + err.Error()}
	case len(data) > tool.MaxArgsBytes:
		return pendingFile{rel: rel, why: fmt.Sprintf("over the %d bytes fs.write takes", tool.MaxArgsBytes)}
	case !utf8.Valid(data):
		return pendingFile{rel: rel, why: "not UTF-8 text: fs.write writes text"}
	}
	return pendingFile{rel: rel, data: data}
}

// kindOf names a non-regular file's type for a refusal.
func kindOf(m fs.FileMode) string { return "a " + regfile.Kind(m) }

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// withPending proposes what a confined command left in its pending
// folder (cl.pending, when set) before its result is recorded, and adds
// the report to the result, or to *execErr when the command failed.
// The error is the runtime's.
func (r *Router) withPending(ctx context.Context, cl *call, out *tool.Result, execErr *error) error {
	if cl.pending == "" {
		return nil
	}
	report, err := r.proposePending(ctx, cl)
	switch {
	case err != nil:
		return err
	case len(report) == 0:
	case *execErr != nil:
		*execErr = fmt.Errorf("%w\n%s", *execErr, report)
	default:
		out.Output = append(out.Output, report...)
	}
	return nil
}

// proposePending takes cl's pending folder and submits each file as a
// PendingTool call on cl's behalf (call ID "<cl>.pending.<n>"), each
// through every gate; it returns the lines the command's result ends
// with, one per file and what became of it. A command whose output is
// untrusted taints the session first: what it proposes is as untrusted
// as what it printed. The error is the runtime's (audit, TDD journal).
func (r *Router) proposePending(ctx context.Context, cl *call) ([]byte, error) {
	files, err := takePending(cl.pending)
	if err != nil && !errors.Is(err, errStopWalk) {
		r.o.Logger.WarnContext(ctx, "pending folder", "call", cl.id, "err", err)
		if len(files) == 0 {
			return []byte("\n[pending/: " + err.Error() + "; nothing was proposed]"), nil
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	if cl.op != nil && slices.Contains(cl.op.Tags, tool.TagUntrustedOutput) {
		if err := r.markUntrusted(ctx, cl); err != nil {
			return nil, err
		}
	}
	via := cl.name + " call " + cl.id
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n[pending/: %d file(s), each proposed as %s into the change set]\n", len(files), PendingTool)
	for i, f := range files {
		id := fmt.Sprintf("%s.pending.%d", cl.id, i+1)
		name := "pending/" + f.rel
		if f.rel == "." {
			name = "pending/"
		}
		why := f.why
		var args []byte
		if why == "" {
			args, err = json.Marshal(struct {
				Path    string `json:"path"`
				Content string `json:"content"`
			}{f.rel, string(f.data)})
			if err != nil || len(args) > tool.MaxArgsBytes {
				why = fmt.Sprintf("its fs.write arguments would be over %d bytes", tool.MaxArgsBytes)
			}
		}
		if why != "" {
			ref := Refusal{Gate: GateNormalize, Rule: RulePending, Reason: name + ": " + why, Instead: "put regular text files of at most 1 MiB under pending/, at their path in the workspace"}
			if _, err := r.refuse(ctx, &call{id: id, name: PendingTool, via: via}, ref, nil); err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "%s: refused: %s\n", name, why)
			continue
		}
		res, err := r.callVia(ctx, llm.ToolCall{ID: id, Name: PendingTool, Args: args}, via)
		if err != nil {
			return nil, err
		}
		if res.IsError {
			fmt.Fprintf(&b, "%s: refused: %s\n", name, oneLine(res.Content))
			continue
		}
		fmt.Fprintf(&b, "%s: written into the change set as %s (%s)\n", name, f.rel, res.Decision)
	}
	return b.Bytes(), nil
}
