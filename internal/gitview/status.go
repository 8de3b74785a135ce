package gitview

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	git "github.com/go-git/go-git/v5"
)

// StatusOptions narrow Status.
type StatusOptions struct {
	// Path, when set, keeps only entries at or below this
	// workspace-relative path.
	Path string
	// Max caps the listed entries (default 500); the rest are counted.
	Max int
}

// Status renders the working tree's status in git's short format: a
// "## branch" line, then one "XY path" line per changed path (X the
// index against HEAD, Y the working tree against the index, "??"
// untracked). Ignored files are not listed.
func (r *Repo) Status(ctx context.Context, o StatusOptions) (out string, err error) {
	defer guard(&err)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if o.Max <= 0 {
		o.Max = 500
	}
	var b strings.Builder
	if err := r.branchLine(&b); err != nil {
		return "", err
	}
	if err := r.prepareWalk(); err != nil {
		return "", err
	}
	st, err := r.wt.Status()
	if err != nil {
		return "", fmt.Errorf("gitview: status: %w", err)
	}
	tracked, err := r.trackedDirs()
	if err != nil {
		return "", err
	}
	codes := map[string]string{}
	paths := make([]string, 0, len(st))
	for p, s := range st {
		if s.Staging == git.Unmodified && s.Worktree == git.Unmodified {
			continue
		}
		if !under(p, o.Path) {
			continue
		}
		code := fmt.Sprintf("%c%c", s.Staging, s.Worktree)
		if s.Worktree == git.Untracked {
			// As git does, a directory holding nothing tracked is one
			// "?? dir/" line.
			p = untrackedTop(p, tracked)
		}
		if _, dup := codes[p]; dup {
			continue
		}
		codes[p] = code
		paths = append(paths, p)
	}
	// git's order: tracked changes, then untracked entries, each by path.
	slices.SortFunc(paths, func(a, b string) int {
		ua, ub := codes[a] == "??", codes[b] == "??"
		if ua != ub {
			if ua {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	if len(paths) == 0 {
		if o.Path != "" && o.Path != "." {
			fmt.Fprintf(&b, "nothing changed under %s\n", o.Path)
		} else {
			b.WriteString("nothing to commit, working tree clean\n")
		}
		return b.String(), nil
	}
	for i, p := range paths {
		if i == o.Max {
			fmt.Fprintf(&b, "[git.status: %d more entries not shown; narrow with path]\n", len(paths)-i)
			break
		}
		fmt.Fprintf(&b, "%s %s\n", codes[p], quotePath(p))
	}
	return b.String(), nil
}

// trackedDirs returns every directory that holds a file of the index.
func (r *Repo) trackedDirs() (map[string]bool, error) {
	idx, err := r.r.Storer.Index()
	if err != nil {
		return nil, fmt.Errorf("gitview: index: %w", err)
	}
	dirs := map[string]bool{}
	for _, e := range idx.Entries {
		for d := path.Dir(e.Name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	return dirs, nil
}

// untrackedTop returns the highest directory above the untracked file p
// that holds no tracked file ("dir/"), or p.
func untrackedTop(p string, tracked map[string]bool) string {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && !tracked[p[:i]] {
			return p[:i+1]
		}
	}
	return p
}

// branchLine writes "## main (abc1234 subject)" or the detached/unborn
// forms.
func (r *Repo) branchLine(b *strings.Builder) error {
	branch, c, err := r.head()
	if err != nil {
		return err
	}
	switch {
	case c == nil:
		fmt.Fprintf(b, "## No commits yet on %s\n", branch)
	case branch == "":
		fmt.Fprintf(b, "## HEAD (detached at %s) %s\n", c.Hash.String()[:7], subject(c.Message))
	default:
		fmt.Fprintf(b, "## %s (%s %s)\n", branch, c.Hash.String()[:7], subject(c.Message))
	}
	return nil
}

// under reports whether p is dir or below it ("" and "." hold all).
func under(p, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return dir == "" || dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

func subject(msg string) string {
	s, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	if len(s) > 72 {
		s = s[:69] + "..."
	}
	return s
}

// quotePath quotes a path the way git does when it holds unusual bytes.
func quotePath(p string) string {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == '"' || c == '\\' || c == 0x7f {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}
