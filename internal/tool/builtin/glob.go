package builtin

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// GlobIn is search.glob's input.
type GlobIn struct {
	Pattern string `json:"pattern" jsonschema:"a glob over workspace-relative paths: * and ? within a name, ** for any number of directories, e.g. **/*_test.go"`
	Path    string `json:"path,omitempty" jsonschema:"directory to search from; default the workspace root"`
	// IncludeIgnored lists what .gitignore excludes too.
	IncludeIgnored bool `json:"include_ignored,omitempty" jsonschema:"also list files .gitignore excludes (build output, dependencies)"`
}

// maxGlobResults caps search.glob's list.
const maxGlobResults = 1000

func (b *builtins) glob() (*tool.Tool, error) {
	return tool.New(tool.Definition[GlobIn]{
		Name:        "search.glob",
		Description: "List the workspace's files (with your pending edits) whose path matches a glob such as **/*.go or cmd/*/main.go. Skips .git and what .gitignore excludes (include_ignored lists those too). A path with unusual characters is shown in double quotes, escaped, as fs.list shows it.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GlobIn, op *operation.Operation) error {
			if _, err := globMatch(in.Pattern, "x"); err != nil {
				return err
			}
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *GlobIn) (tool.Result, error) {
			rel, err := b.rel(orDot(in.Path))
			if err != nil {
				return errResult(err), nil
			}
			w, err := newViewWalker(b.o.ChangeSet, in.IncludeIgnored)
			if err != nil {
				return errResult(err), nil
			}
			defer w.Close()
			w.links = true
			var out []string
			err = w.walk(ctx, rel, func(f fileRef) error {
				sub := strings.TrimPrefix(strings.TrimPrefix(f.rel, rel), "/")
				if rel == "." {
					sub = f.rel
				}
				if ok, _ := globMatch(in.Pattern, sub); ok {
					out = append(out, showName(f.rel))
					if len(out) >= maxGlobResults {
						return errEnough
					}
				}
				return nil
			})
			if ctx.Err() != nil {
				return tool.Result{}, fmt.Errorf("search.glob: %w", ctx.Err())
			}
			if err != nil && !errors.Is(err, errEnough) {
				return errResult(err), nil
			}
			if len(out) == 0 {
				return tool.Result{Output: []byte("no files match\n")}, nil
			}
			s := strings.Join(out, "\n") + "\n"
			if len(out) >= maxGlobResults {
				s += fmt.Sprintf("[search.glob: stopped after %d files]\n", maxGlobResults)
			}
			return tool.Result{Output: []byte(s)}, nil
		},
	})
}

// globMatch matches a slash-separated path against pattern, where a
// "**" segment matches any number of segments (also none). It runs in
// O(pattern segments × path segments): results are memoized, so a
// pattern full of "**" cannot make it explode.
func globMatch(pattern, name string) (bool, error) {
	if pattern == "" {
		return false, errors.New("the glob pattern is empty")
	}
	pat := strings.Split(pattern, "/")
	for _, p := range pat {
		if p != "**" {
			if _, err := path.Match(p, ""); err != nil {
				return false, fmt.Errorf("bad glob %q: %w", pattern, err)
			}
		}
	}
	segs := strings.Split(name, "/")
	memo := make(map[[2]int]bool)
	var match func(i, j int) bool
	match = func(i, j int) bool {
		k := [2]int{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		var r bool
		switch {
		case i == len(pat):
			r = j == len(segs)
		case pat[i] == "**":
			r = match(i+1, j) || (j < len(segs) && match(i, j+1))
		case j == len(segs):
			r = false
		default:
			ok, _ := path.Match(pat[i], segs[j])
			r = ok && match(i+1, j+1)
		}
		memo[k] = r
		return r
	}
	return match(0, 0), nil
}
