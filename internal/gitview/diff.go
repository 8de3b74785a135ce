package gitview

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// DiffOptions choose what Diff compares.
type DiffOptions struct {
	// Base is the revision compared against (default HEAD).
	Base string
	// Target, when set, is a second revision: the diff is Base..Target
	// between two commits, and Staged is ignored.
	Target string
	// Staged compares the index (what a commit would record) with Base
	// instead of the working tree.
	Staged bool
	// Paths keeps only files at or below these workspace-relative paths.
	Paths []string
	// Stat renders a diffstat instead of the patch.
	Stat bool
	// Context is the number of context lines (default 3).
	Context int
}

// fileDiff is one file's two sides.
type fileDiff struct {
	path     string
	old, new side
}

// Diff renders a unified diff (git's extended headers: new/deleted file
// modes, mode changes, "Binary files ... differ") or a diffstat. Without
// Target it compares Base with the working tree (the session's pending
// edits included) or, with Staged, with the index. Untracked files are
// not in the diff (git.status lists them).
func (r *Repo) Diff(ctx context.Context, o DiffOptions) (out string, err error) {
	defer guard(&err)
	if o.Context <= 0 {
		o.Context = 3
	}
	base, err := r.baseCommit(o.Base)
	if err != nil {
		return "", err
	}
	var baseTree *object.Tree
	if base != nil {
		if baseTree, err = base.Tree(); err != nil {
			return "", fmt.Errorf("gitview: tree of %s: %w", o.Base, err)
		}
	}
	var files []fileDiff
	if o.Target != "" {
		files, err = r.commitFiles(ctx, baseTree, o)
	} else {
		files, err = r.worktreeFiles(ctx, base, baseTree, o)
	}
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "no differences\n", nil
	}
	var b strings.Builder
	var stats []fileStat
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		st := writeFileDiff(&b, f, o.Context, o.Stat)
		stats = append(stats, st)
	}
	if o.Stat {
		b.Reset()
		writeStat(&b, stats)
	}
	return b.String(), nil
}

// baseCommit resolves Base; nil before the first commit when Base is
// the default.
func (r *Repo) baseCommit(rev string) (*object.Commit, error) {
	if rev == "" || rev == "HEAD" {
		_, c, err := r.head()
		return c, err
	}
	return r.commit(rev)
}

func keep(p string, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, d := range paths {
		if under(p, d) {
			return true
		}
	}
	return false
}

// commitFiles lists the files that differ between baseTree and Target.
func (r *Repo) commitFiles(ctx context.Context, baseTree *object.Tree, o DiffOptions) ([]fileDiff, error) {
	tc, err := r.commit(o.Target)
	if err != nil {
		return nil, err
	}
	tt, err := tc.Tree()
	if err != nil {
		return nil, err
	}
	changes, err := object.DiffTreeWithOptions(ctx, baseTree, tt, &object.DiffTreeOptions{})
	if err != nil {
		return nil, fmt.Errorf("gitview: diff trees: %w", err)
	}
	var out []fileDiff
	for _, ch := range changes {
		name := ch.To.Name
		if name == "" {
			name = ch.From.Name
		}
		if !keep(name, o.Paths) {
			continue
		}
		f := fileDiff{path: name}
		if ch.From.Name != "" {
			if f.old, err = r.blobSide(ch.From.TreeEntry.Hash, ch.From.TreeEntry.Mode); err != nil {
				return nil, err
			}
		}
		if ch.To.Name != "" {
			if f.new, err = r.blobSide(ch.To.TreeEntry.Hash, ch.To.TreeEntry.Mode); err != nil {
				return nil, err
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b fileDiff) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// worktreeFiles lists the files whose working-tree (or staged) content
// differs from base.
func (r *Repo) worktreeFiles(ctx context.Context, base *object.Commit, baseTree *object.Tree, o DiffOptions) ([]fileDiff, error) {
	if err := r.prepareWalk(); err != nil {
		return nil, err
	}
	st, err := r.wt.Status()
	if err != nil {
		return nil, fmt.Errorf("gitview: status: %w", err)
	}
	cand := map[string]bool{}
	for p, s := range st {
		if s.Worktree == git.Untracked {
			continue
		}
		if s.Staging != git.Unmodified || (!o.Staged && s.Worktree != git.Unmodified) {
			cand[p] = true
		}
	}
	// A base other than HEAD also differs where HEAD does.
	_, head, err := r.head()
	if err != nil {
		return nil, err
	}
	if head != nil && base != nil && head.Hash != base.Hash {
		ht, err := head.Tree()
		if err != nil {
			return nil, err
		}
		changes, err := object.DiffTreeWithOptions(ctx, baseTree, ht, &object.DiffTreeOptions{})
		if err != nil {
			return nil, err
		}
		for _, ch := range changes {
			cand[ch.From.Name] = true
			cand[ch.To.Name] = true
		}
		delete(cand, "")
	}
	var out []fileDiff
	for p := range cand {
		if !keep(p, o.Paths) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := fileDiff{path: p}
		if f.old, err = r.treeSide(baseTree, p); err != nil {
			return nil, err
		}
		if o.Staged {
			f.new, err = r.indexSide(p)
		} else {
			f.new, err = r.worktreeSide(p)
		}
		if err != nil {
			return nil, err
		}
		if same(f.old, f.new) {
			continue
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b fileDiff) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

func same(a, b side) bool {
	if a.exists != b.exists {
		return false
	}
	if !a.exists {
		return true
	}
	if a.mode != b.mode || a.size != b.size {
		return false
	}
	if !a.hash.IsZero() && !b.hash.IsZero() {
		return a.hash == b.hash
	}
	return a.data != nil && b.data != nil && bytes.Equal(a.data, b.data)
}

type fileStat struct {
	path       string
	add, del   int
	binary     bool
	oldN, newN int64
}

func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

// writeFileDiff writes one file's patch (unless statOnly) and returns its
// stat.
func writeFileDiff(b *strings.Builder, f fileDiff, context int, statOnly bool) fileStat {
	st := fileStat{path: f.path, oldN: f.old.size, newN: f.new.size}
	a, bn := "a/"+quotePath(f.path), "b/"+quotePath(f.path)
	fmt.Fprintf(b, "diff --git %s %s\n", a, bn)
	oldLabel, newLabel := a, bn
	switch {
	case !f.old.exists:
		fmt.Fprintf(b, "new file mode %s\n", modeString(f.new))
		oldLabel = "/dev/null"
	case !f.new.exists:
		fmt.Fprintf(b, "deleted file mode %s\n", modeString(f.old))
		newLabel = "/dev/null"
	case f.old.mode != f.new.mode:
		fmt.Fprintf(b, "old mode %s\nnew mode %s\n", modeString(f.old), modeString(f.new))
	}
	tooBig := f.old.size > maxDiffSide || f.new.size > maxDiffSide
	if tooBig || isBinary(f.old.data) || isBinary(f.new.data) {
		st.binary = true
		if tooBig {
			fmt.Fprintf(b, "Large files %s and %s differ (%d → %d bytes; too large to show)\n", oldLabel, newLabel, f.old.size, f.new.size)
		} else {
			fmt.Fprintf(b, "Binary files %s and %s differ (%d → %d bytes)\n", oldLabel, newLabel, f.old.size, f.new.size)
		}
		return st
	}
	if f.old.exists && f.new.exists && bytes.Equal(f.old.data, f.new.data) {
		return st // mode change only
	}
	oldS, newS := string(f.old.data), string(f.new.data)
	edits := udiff.Lines(oldS, newS)
	u, err := udiff.ToUnified(oldLabel, newLabel, oldS, edits, context)
	if err != nil {
		fmt.Fprintf(b, "(diff failed: %v)\n", err)
		return st
	}
	for _, l := range strings.SplitAfter(u, "\n") {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		case strings.HasPrefix(l, "+"):
			st.add++
		case strings.HasPrefix(l, "-"):
			st.del++
		}
	}
	if !statOnly {
		b.WriteString(u)
		if u != "" && !strings.HasSuffix(u, "\n") {
			b.WriteString("\n")
		}
	}
	return st
}

func modeString(s side) string { return fmt.Sprintf("%06o", uint32(s.mode)) }

// writeStat writes git's --stat form.
func writeStat(b *strings.Builder, stats []fileStat) {
	width := 0
	for _, s := range stats {
		width = max(width, len(quotePath(s.path)))
	}
	width = min(width, 60)
	adds, dels := 0, 0
	for _, s := range stats {
		if s.binary {
			fmt.Fprintf(b, " %-*s | Bin %d -> %d bytes\n", width, quotePath(s.path), s.oldN, s.newN)
			continue
		}
		adds += s.add
		dels += s.del
		bar := strings.Repeat("+", min(s.add, 40)) + strings.Repeat("-", min(s.del, 40))
		fmt.Fprintf(b, " %-*s | %4d %s\n", width, quotePath(s.path), s.add+s.del, bar)
	}
	fmt.Fprintf(b, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		len(stats), plural(len(stats)), adds, plural(adds), dels, plural(dels))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
