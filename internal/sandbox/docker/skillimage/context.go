package skillimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
)

// ignoreRule is one line of a .dockerignore.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// parseIgnore reads a .dockerignore as the engine's clients do: one
// pattern a line, # comments, a leading ! re-includes, a leading / is
// the context's root, ** spans directories; the last rule that matches a
// path (or one of its parent directories) decides.
func parseIgnore(b []byte) ([]ignoreRule, error) {
	var out []ignoreRule
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		r := ignoreRule{}
		if rest, ok := strings.CutPrefix(l, "!"); ok {
			r.negate, l = true, strings.TrimSpace(rest)
		}
		l = path.Clean(filepath.ToSlash(l))
		l = strings.TrimPrefix(l, "/")
		if l == "" || l == "." {
			continue
		}
		re, err := globRegexp(l)
		if err != nil {
			return nil, fmt.Errorf(".dockerignore:%d: %q: %w", n, l, err)
		}
		r.re = re
		out = append(out, r)
	}
	return out, sc.Err()
}

// globRegexp turns a .dockerignore pattern into a regular expression
// over slash-separated relative paths.
func globRegexp(p string) (*regexp.Regexp, error) {
	var sb strings.Builder
	sb.WriteString("^")
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			i++
			if i+1 < len(p) && p[i+1] == '/' {
				i++
				sb.WriteString("(.*/)?")
			} else {
				sb.WriteString(".*")
			}
		case c == '*':
			sb.WriteString("[^/]*")
		case c == '?':
			sb.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed [")
			}
			class := p[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			sb.WriteString("[" + class + "]")
			i += j
		case c == '\\' && i+1 < len(p):
			i++
			sb.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			sb.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	sb.WriteString("$")
	return regexp.Compile(sb.String())
}

// ignored reports whether rel (slash-separated) is left out of the
// context: a rule matching it or one of its parent directories.
func ignored(rules []ignoreRule, rel string) bool {
	out := false
	for _, r := range rules {
		for p := rel; p != "." && p != ""; p = path.Dir(p) {
			if r.re.MatchString(p) {
				out = !r.negate
				break
			}
		}
	}
	return out
}

// buildContext is a skill's build context as a deterministic tar: entries
// sorted by name, times and owners fixed, so its hash changes only with
// names, modes, link targets and contents.
type buildContext struct {
	entries map[string]docker.TarEntry
	size    int64
}

// readContext reads dir as the build context: every file, directory and
// symbolic link (kept as a link, never followed) that .dockerignore does
// not leave out; the Dockerfile and .dockerignore always. Other file
// types (sockets, devices) are skipped. The Dockerfile's entry is
// dockerfile's contents instead of the file's (the base image's name put
// in). A context over limit bytes is refused.
func readContext(dir, dockerfileRel string, dockerfile []byte, limit int64) (*buildContext, error) {
	bc := &buildContext{entries: map[string]docker.TarEntry{}}
	var rules []ignoreRule
	if b, err := os.ReadFile(filepath.Join(dir, ".dockerignore")); err == nil {
		if rules, err = parseIgnore(b); err != nil {
			return nil, err
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	keep := func(rel string) bool {
		return rel == dockerfileRel || rel == ".dockerignore" || !ignored(rules, rel)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !keep(rel) {
			// A directory stays walked when a later ! rule may bring
			// something inside it back.
			if d.IsDir() && !hasNegation(rules) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			bc.entries[rel] = docker.TarEntry{Type: tar.TypeDir, Mode: int64(info.Mode().Perm())}
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			bc.addParents(rel)
			bc.entries[rel] = docker.TarEntry{Type: tar.TypeSymlink, Mode: 0o777, Link: l}
		case info.Mode().IsRegular():
			bc.size += info.Size()
			if bc.size > limit {
				return fmt.Errorf("%w: the build context is over %d bytes (list what the image does not need in .dockerignore)", ErrInvalid, limit)
			}
			data := dockerfile
			if rel != dockerfileRel {
				if data, err = os.ReadFile(p); err != nil {
					return err
				}
			}
			bc.addParents(rel)
			bc.entries[rel] = docker.TarEntry{Type: tar.TypeReg, Mode: int64(info.Mode().Perm()), Data: data}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("skillimage: reading the build context %s: %w", dir, err)
	}
	return bc, nil
}

func hasNegation(rules []ignoreRule) bool {
	for _, r := range rules {
		if r.negate {
			return true
		}
	}
	return false
}

// addParents adds the directories above rel that are not yet entries
// (kept for a file a ! rule brought back from an ignored directory).
func (bc *buildContext) addParents(rel string) {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := bc.entries[d]; !ok {
			bc.entries[d] = docker.TarEntry{Type: tar.TypeDir, Mode: 0o755}
		}
	}
}

// tar returns the context as a tar and the hex sha256 of its bytes.
func (bc *buildContext) tar() ([]byte, string, error) { return docker.DeterministicTar(bc.entries) }
