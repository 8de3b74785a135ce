package gitview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// CommitOptions describe a commit.
type CommitOptions struct {
	// Message is the commit message; required.
	Message string
	// Paths are staged before committing (new, modified and deleted
	// files at or below each); empty means every change of the working
	// tree, untracked files included and ignored files excluded, as
	// `git add -A`.
	Paths []string
	// Author and Email identify the author and committer; required.
	Author, Email string
	// When is the commit time (default now).
	When time.Time
}

// ErrNothingToCommit: the commit would record no change.
var ErrNothingToCommit = errors.New("gitview: nothing to commit")

// Commit stages o.Paths (or everything) and records a commit on the
// current branch. Every object, the index and the branch's ref are written
// through the change set: the real repository changes only when the change
// set is applied. No hook, filter or signing program runs. It returns a
// summary: "[branch abc1234] subject" and a diffstat.
func (r *Repo) Commit(ctx context.Context, o CommitOptions) (out string, err error) {
	defer guard(&err)
	msg := strings.TrimSpace(o.Message)
	if msg == "" {
		return "", errors.New("gitview: the commit message is empty")
	}
	if o.Author == "" || o.Email == "" || strings.ContainsAny(o.Author+o.Email, "<>\n\x00") {
		return "", fmt.Errorf("gitview: bad author identity %q <%s>", o.Author, o.Email)
	}
	if o.When.IsZero() {
		o.When = time.Now()
	}
	if err := r.prepareWalk(); err != nil {
		return "", err
	}
	if len(o.Paths) == 0 {
		if err := r.wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
			return "", fmt.Errorf("gitview: stage: %w", err)
		}
	}
	for _, p := range o.Paths {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		rel, err := changeset.CheckPath(p)
		if err != nil {
			return "", err
		}
		if rel == "." {
			if err := r.wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
				return "", fmt.Errorf("gitview: stage: %w", err)
			}
			continue
		}
		if rel == ".git" || strings.HasPrefix(rel, ".git/") {
			return "", fmt.Errorf("gitview: %s is inside .git and cannot be committed", p)
		}
		if err := r.wt.AddWithOptions(&git.AddOptions{Path: rel}); err != nil {
			return "", fmt.Errorf("gitview: stage %s: %w", p, err)
		}
	}
	sig := &object.Signature{Name: o.Author, Email: o.Email, When: o.When}
	h, err := r.wt.Commit(msg+"\n", &git.CommitOptions{Author: sig, Committer: sig})
	if errors.Is(err, git.ErrEmptyCommit) {
		return "", ErrNothingToCommit
	}
	if err != nil {
		return "", fmt.Errorf("gitview: commit: %w", err)
	}
	c, err := r.r.CommitObject(h)
	if err != nil {
		return "", err
	}
	branch, _, err := r.head()
	if err != nil {
		return "", err
	}
	if branch == "" {
		branch = "detached HEAD"
	}
	var b strings.Builder
	root := ""
	if c.NumParents() == 0 {
		root = " (root-commit)"
	}
	fmt.Fprintf(&b, "[%s%s %s] %s\n", branch, root, h.String()[:7], subject(msg))
	base := ""
	if c.NumParents() > 0 {
		base = c.ParentHashes[0].String()
	}
	stat, err := r.commitStat(ctx, base, c)
	if err != nil {
		return "", err
	}
	b.WriteString(stat)
	return b.String(), nil
}

// commitStat is the diffstat of c against base ("" for none).
func (r *Repo) commitStat(ctx context.Context, base string, c *object.Commit) (string, error) {
	var bt *object.Tree
	if base != "" {
		bc, err := r.commit(base)
		if err != nil {
			return "", err
		}
		if bt, err = bc.Tree(); err != nil {
			return "", err
		}
	}
	files, err := r.commitFiles(ctx, bt, DiffOptions{Target: c.Hash.String()})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var stats []fileStat
	for _, f := range files {
		stats = append(stats, writeFileDiff(&b, f, 3, true))
	}
	b.Reset()
	writeStat(&b, stats)
	return b.String(), nil
}
