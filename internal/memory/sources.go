package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// SourcesDir is the first component of a source file's path in the
// index: sources/NAME/REL, NAME the source's and REL the file's path in
// it.
const SourcesDir = "sources"

// Source is a folder indexed read-only besides the memory files
// (memory.sources: a repository's docs/). Its Markdown files are
// searched and read as sources/Name/...; nothing writes them through
// fluffy's memory tools.
type Source struct {
	Name string
	Dir  string
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// SourcesFrom names the configured folders: each by its base name (made
// safe), a repeated name numbered (docs, docs-2). A leading "~/" means
// home; a relative folder or an empty entry is left out.
func SourcesFrom(dirs []string, home string) []Source {
	var out []Source
	seen := map[string]bool{}
	for _, d := range dirs {
		if strings.HasPrefix(d, "~/") && home != "" {
			d = filepath.Join(home, d[2:])
		}
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		base := strings.Trim(unsafeName.ReplaceAllString(filepath.Base(d), "-"), ".-")
		if base == "" {
			base = "source"
		}
		name := base
		for i := 2; seen[name]; i++ {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		seen[name] = true
		out = append(out, Source{Name: name, Dir: d})
	}
	return out
}

// IsSourcePath reports whether rel names a Markdown file of a source
// (sources/NAME/....md), clean and without "..".
func IsSourcePath(rel string) bool {
	return path.Clean(rel) == rel && strings.HasPrefix(rel, SourcesDir+"/") && strings.Count(rel, "/") >= 2 &&
		strings.HasSuffix(rel, ".md") && !strings.Contains(rel, "/../")
}

// findSource returns the source a sources/NAME/... path is in and the
// path within it.
func findSource(sources []Source, rel string) (Source, string, bool) {
	if !IsSourcePath(rel) {
		return Source{}, "", false
	}
	name, in, _ := strings.Cut(strings.TrimPrefix(rel, SourcesDir+"/"), "/")
	for _, s := range sources {
		if s.Name == name {
			return s, in, true
		}
	}
	return Source{}, "", false
}

// syncSources indexes each source's Markdown files again where their
// hash changed; known loses the paths it saw.
func (x *Index) syncSources(ctx context.Context, rep *SyncReport, known map[string]string) error {
	for _, s := range x.o.Sources {
		root, err := os.OpenRoot(s.Dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("memory: open source %s: %w", s.Dir, err)
		}
		err = func() error {
			defer root.Close()
			var files []string
			err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && p != "." && strings.HasPrefix(d.Name(), ".") {
					return fs.SkipDir // .git and the like
				}
				if d.Type().IsRegular() && strings.HasSuffix(p, ".md") {
					files = append(files, p)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("memory: list source %s: %w", s.Dir, err)
			}
			for _, in := range files {
				if err := ctx.Err(); err != nil {
					return err
				}
				rel := SourcesDir + "/" + s.Name + "/" + in
				changed, n, err := x.syncFile(ctx, root, in, rel, known[rel])
				delete(known, rel)
				if err := x.count(ctx, rep, rel, changed, n, err); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}
