package gitview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// LogOptions choose the commits Log shows.
type LogOptions struct {
	// Revision to start from (default HEAD).
	Revision string
	// N is how many commits to show (default 10).
	N int
	// Path keeps only commits that changed a file at or below it.
	Path string
	// Full shows the whole message, author and date; otherwise one line
	// per commit.
	Full bool
	// MaxScan bounds how many commits are examined while looking for
	// ones that touch Path (default 20,000).
	MaxScan int
}

var errStop = errors.New("stop")

// Log renders the history from Revision, newest first (committer time).
func (r *Repo) Log(ctx context.Context, o LogOptions) (out string, err error) {
	defer guard(&err)
	if o.N <= 0 {
		o.N = 10
	}
	if o.MaxScan <= 0 {
		o.MaxScan = 20000
	}
	var from *object.Commit
	if o.Revision == "" || o.Revision == "HEAD" {
		var branch string
		if branch, from, err = r.head(); err != nil {
			return "", err
		}
		if from == nil {
			return fmt.Sprintf("no commits yet on %s\n", branch), nil
		}
	} else if from, err = r.commit(o.Revision); err != nil {
		return "", err
	}
	lo := &git.LogOptions{From: from.Hash, Order: git.LogOrderCommitterTime}
	p := strings.TrimSuffix(o.Path, "/")
	filtered := p != "" && p != "."
	it, err := r.r.Log(lo)
	if err != nil {
		return "", fmt.Errorf("gitview: log: %w", err)
	}
	defer it.Close()
	var b strings.Builder
	shown, scanned := 0, 0
	err = it.ForEach(func(c *object.Commit) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if shown >= o.N {
			return storer.ErrStop
		}
		if scanned++; scanned > o.MaxScan {
			return errStop
		}
		if filtered {
			ok, err := r.touches(c, p)
			if err != nil || !ok {
				return err
			}
		}
		shown++
		if o.Full {
			writeFull(&b, c)
		} else {
			fmt.Fprintf(&b, "%s %s %s %s\n", c.Hash.String()[:7], c.Author.When.UTC().Format("2006-01-02"), oneName(c.Author.Name), subject(c.Message))
		}
		return nil
	})
	if err != nil && !errors.Is(err, storer.ErrStop) && !errors.Is(err, errStop) {
		return "", fmt.Errorf("gitview: log: %w", err)
	}
	if scanned > o.MaxScan {
		fmt.Fprintf(&b, "[git.log: stopped after examining %d commits]\n", o.MaxScan)
	}
	if shown == 0 {
		if filtered {
			return fmt.Sprintf("no commits touch %s\n", o.Path) + b.String(), nil
		}
		return "no commits\n", nil
	}
	if shown == o.N {
		fmt.Fprintf(&b, "[git.log: showing %d commits; ask for more with n]\n", shown)
	}
	return b.String(), nil
}

// touches reports whether c changed p: its entry at p differs from the
// one in every parent (git log's history simplification for a path).
func (r *Repo) touches(c *object.Commit, p string) (bool, error) {
	h, err := entryHash(c, p)
	if err != nil {
		return false, err
	}
	if c.NumParents() == 0 {
		return h != "", nil
	}
	for _, ph := range c.ParentHashes {
		pc, err := r.r.CommitObject(ph)
		if err != nil {
			return false, fmt.Errorf("gitview: parent %s: %w", ph, err)
		}
		hp, err := entryHash(pc, p)
		if err != nil {
			return false, err
		}
		if hp == h {
			return false, nil
		}
	}
	return true, nil
}

// entryHash is the hash and mode of c's tree entry at p ("" when absent).
func entryHash(c *object.Commit, p string) (string, error) {
	t, err := c.Tree()
	if err != nil {
		return "", fmt.Errorf("gitview: tree of %s: %w", c.Hash, err)
	}
	e, err := t.FindEntry(p)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return e.Hash.String() + e.Mode.String(), nil
}

func oneName(s string) string {
	if s == "" {
		return "(no name)"
	}
	return strings.ReplaceAll(s, " ", "\u00a0")
}

func writeFull(b *strings.Builder, c *object.Commit) {
	fmt.Fprintf(b, "commit %s\n", c.Hash)
	if len(c.ParentHashes) > 1 {
		var ps []string
		for _, p := range c.ParentHashes {
			ps = append(ps, p.String()[:7])
		}
		fmt.Fprintf(b, "Merge: %s\n", strings.Join(ps, " "))
	}
	fmt.Fprintf(b, "Author: %s <%s>\nDate:   %s\n\n", c.Author.Name, c.Author.Email, c.Author.When.Format(time.RFC3339))
	for _, l := range strings.Split(strings.TrimRight(c.Message, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	b.WriteString("\n")
}
