package gitview

import (
	"fmt"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// IgnorePatterns parses a .gitignore's lines for go-git's matcher, adapting
// the forms where its semantics differ from git's: blank lines and
// comments skipped, a trailing CR dropped, "[!...]" made "[^...]" (git's
// negated class; filepath.Match reads "!" literally), and a trailing
// "/**" made "/**/*" (git's "dir/**" matches what is inside dir, not dir
// itself, so a later "!dir/file" can re-include a file). "\#" and "\!"
// stay escaped: filepath.Match reads them as the literal characters.
func IgnorePatterns(b []byte, dir []string) []gitignore.Pattern {
	var ps []gitignore.Pattern
	for len(b) > 0 {
		var line []byte
		if i := indexNL(b); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		s := strings.TrimSuffix(string(line), "\r")
		if strings.TrimSpace(s) == "" || strings.HasPrefix(s, "#") {
			continue
		}
		s = negatedClasses(s)
		if t := strings.TrimRight(s, " "); strings.HasSuffix(t, "/**") {
			s = t + "/*"
		}
		ps = append(ps, gitignore.ParsePattern(s, dir))
	}
	return ps
}

// negatedClasses rewrites unescaped "[!" as "[^".
func negatedClasses(s string) string {
	if !strings.Contains(s, "[!") {
		return s
	}
	out := []byte(s)
	for i := 0; i+1 < len(out); i++ {
		switch {
		case out[i] == '\\':
			i++ // skip the escaped byte
		case out[i] == '[' && out[i+1] == '!':
			out[i+1] = '^'
		}
	}
	return string(out)
}

func indexNL(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// ignoredDirs returns a function reporting whether a directory of the
// working tree is ignored and holds nothing tracked, so the git library's
// walk of the working tree can skip it (node_modules, build output):
// .git/info/exclude and every .gitignore outside such directories, parsed
// with IgnorePatterns.
func (r *Repo) ignoredDirs() (func(rel string) bool, error) {
	tracked, err := r.trackedDirs()
	if err != nil {
		return nil, err
	}
	var pats []gitignore.Pattern
	if b := r.readView(".git/info/exclude"); b != nil {
		pats = append(pats, IgnorePatterns(b, nil)...)
	}
	m := func(rel string) bool {
		segs := strings.Split(rel, "/")
		for i := len(pats) - 1; i >= 0; i-- {
			if res := pats[i].Match(segs, true); res != gitignore.NoMatch {
				return res == gitignore.Exclude && !tracked[rel]
			}
		}
		return false
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		var segs []string
		if dir != "." {
			segs = strings.Split(dir, "/")
		}
		if b := r.readView(path.Join(dir, ".gitignore")); b != nil {
			pats = append(pats, IgnorePatterns(b, segs)...)
		}
		ents, err := r.cs.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.Kind != changeset.KindDir || path.Base(e.Path) == ".git" || m(e.Path) {
				continue
			}
			if err := walk(e.Path); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return nil, fmt.Errorf("gitview: read ignore files: %w", err)
	}
	return m, nil
}

// readView reads a small file of the merged view (nil when absent).
func (r *Repo) readView(rel string) []byte {
	e, err := r.cs.Stat(rel)
	if err != nil || e.Kind != changeset.KindFile || e.Size > 1<<20 {
		return nil
	}
	b, _ := r.cs.ReadFile(rel)
	return b
}
