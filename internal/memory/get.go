package memory

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Section is a memory file or a part of one.
type Section struct {
	Path    string
	Heading string
	// Line and EndLine are the lines shown (1-based, inclusive).
	Line, EndLine int
	Text          string
}

// ErrNoSection is returned when a file has no heading of the name asked.
var ErrNoSection = errors.New("no such heading")

// Get reads the memory file rel (workspace-relative), whole or, with
// heading set, the section under the first heading of that title (case
// and surrounding space ignored) up to the next heading of its level or
// above. A path that is not a memory file is refused with ErrOutside;
// the file is read through the workspace root, never followed out.
func Get(root, rel, heading string) (Section, error) {
	return GetFrom(root, nil, rel, heading)
}

// GetFrom is Get that also reads the sources' files (sources/NAME/...),
// each through its source folder's root.
func GetFrom(root string, sources []Source, rel, heading string) (Section, error) {
	rel = strings.TrimPrefix(path.Clean(strings.ReplaceAll(rel, "\\", "/")), "./")
	in := rel
	if src, p, ok := findSource(sources, rel); ok {
		root, in = src.Dir, p
	} else if !IsMemoryPath(rel) {
		return Section{}, fmt.Errorf("%s: %w", rel, ErrOutside)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return Section{}, fmt.Errorf("memory: open the workspace: %w", err)
	}
	defer r.Close()
	fi, err := r.Lstat(in)
	if err != nil {
		return Section{}, fmt.Errorf("memory: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Section{}, fmt.Errorf("memory: %s: %w", rel, fs.ErrInvalid)
	}
	b, err := readFile(r, in)
	if err != nil {
		return Section{}, fmt.Errorf("memory: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	s := Section{Path: rel, Line: 1, EndLine: len(lines), Text: string(b)}
	if heading == "" {
		return s, nil
	}
	want := strings.ToLower(strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(heading), "#")))
	level, from := 0, -1
	for i, ln := range lines {
		l := headingLevel(ln)
		if l == 0 {
			continue
		}
		if from < 0 {
			if strings.ToLower(strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(ln), "#"))) == want {
				level, from = l, i
			}
			continue
		}
		if l <= level {
			s.Heading, s.Line, s.EndLine = heading, from+1, i
			s.Text = strings.Join(lines[from:i], "\n") + "\n"
			return s, nil
		}
	}
	if from < 0 {
		return Section{}, fmt.Errorf("%s: %q: %w", rel, heading, ErrNoSection)
	}
	s.Heading, s.Line = heading, from+1
	s.Text = strings.Join(lines[from:], "\n") + "\n"
	return s, nil
}
