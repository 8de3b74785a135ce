package tui

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// FileDiff is one file's part of a unified diff in git's format.
type FileDiff struct {
	Path    string
	Text    string // the section, from its "diff --git" line
	Added   int    // lines added
	Deleted int    // lines deleted
	Binary  bool
}

// SplitDiff cuts a diff in git's extended format into its files, counting
// added and deleted lines (hunk lines only, not the ---/+++ headers). Text
// before the first "diff --git" line is ignored.
func SplitDiff(diff string) []FileDiff {
	var (
		out    []FileDiff
		cur    *FileDiff
		b      strings.Builder
		inHunk bool
	)
	flush := func() {
		if cur != nil {
			cur.Text = b.String()
			out = append(out, *cur)
		}
		b.Reset()
	}
	for len(diff) > 0 {
		line := diff
		if i := strings.IndexByte(diff, '\n'); i >= 0 {
			line, diff = diff[:i+1], diff[i+1:]
		} else {
			diff = ""
		}
		body := strings.TrimRight(line, "\n")
		if rest, ok := strings.CutPrefix(body, "diff --git "); ok {
			flush()
			cur, inHunk = &FileDiff{Path: gitPath(rest)}, false
		}
		if cur == nil {
			continue
		}
		b.WriteString(line)
		switch {
		case strings.HasPrefix(body, "@@"):
			inHunk = true
		case !inHunk && (strings.HasPrefix(body, "Binary files ") || strings.HasPrefix(body, "Large files ")):
			cur.Binary = true
		case inHunk && strings.HasPrefix(body, "+"):
			cur.Added++
		case inHunk && strings.HasPrefix(body, "-"):
			cur.Deleted++
		}
	}
	flush()
	return out
}

// gitPath takes the path from the rest of a "diff --git a/P b/P" line,
// where both sides name the same path (quoted when it holds unusual bytes).
func gitPath(rest string) string {
	if strings.HasPrefix(rest, `"`) {
		// "a/P" "b/P": the first quoted string.
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\\' {
				i++
				continue
			}
			if rest[i] == '"' {
				if s, err := strconv.Unquote(rest[:i+1]); err == nil {
					return strings.TrimPrefix(s, "a/")
				}
				break
			}
		}
		return rest
	}
	// a/P b/P: len(rest) = 2*len(P) + 5.
	if n := (len(rest) - 5) / 2; n > 0 && len(rest) == 2*n+5 && strings.HasPrefix(rest, "a/") {
		return rest[2 : 2+n]
	}
	if f := strings.Fields(rest); len(f) > 0 {
		return strings.TrimPrefix(f[0], "a/")
	}
	return rest
}

// Stat renders a diff stat as git does: one line per file with its
// counts and a bar of + and -, then the totals. width bounds the bars.
func Stat(c Caps, files []FileDiff, width int) string {
	if len(files) == 0 {
		return ""
	}
	name := 0
	most := 0
	for _, f := range files {
		name = max(name, utf8.RuneCountInString(termsafe.Line(f.Path)))
		most = max(most, f.Added+f.Deleted)
	}
	name = min(name, 50)
	barMax := max(width-name-12, 10)
	var b strings.Builder
	var adds, dels int
	for _, f := range files {
		adds += f.Added
		dels += f.Deleted
		p := Clip(termsafe.Line(f.Path), name)
		if f.Binary {
			fmt.Fprintf(&b, " %-*s | Bin\n", name, p)
			continue
		}
		n := f.Added + f.Deleted
		plus, minus := f.Added, f.Deleted
		if most > barMax {
			plus = scale(f.Added, most, barMax)
			minus = scale(f.Deleted, most, barMax)
		}
		fmt.Fprintf(&b, " %-*s | %4d %s%s\n", name, p, n, c.Paint(Green, strings.Repeat("+", plus)), c.Paint(Red, strings.Repeat("-", minus)))
	}
	fmt.Fprintf(&b, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n", len(files), plural(len(files)), adds, plural(adds), dels, plural(dels))
	return b.String()
}

func scale(n, most, width int) int {
	if n == 0 {
		return 0
	}
	return max(1, n*width/most)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ColorDiff colours a unified diff's lines: additions green, deletions
// red, hunk headers cyan, file headers bold. The diff's text (file names
// and contents from outside fluffy) is escaped with termsafe.String, in
// colour or not, so a file cannot act on the terminal or hide a line
// behind a bidirectional override.
func ColorDiff(c Caps, diff string) string {
	diff = termsafe.String(diff)
	if !c.Color {
		return diff
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(diff, "\n") {
		body := strings.TrimRight(line, "\n")
		nl := line[len(body):]
		switch {
		case strings.HasPrefix(body, "diff --git"), strings.HasPrefix(body, "+++ "), strings.HasPrefix(body, "--- "):
			b.WriteString(c.Paint(Bold, body) + nl)
		case strings.HasPrefix(body, "@@"):
			b.WriteString(c.Paint(Cyan, body) + nl)
		case strings.HasPrefix(body, "+"):
			b.WriteString(c.Paint(Green, body) + nl)
		case strings.HasPrefix(body, "-"):
			b.WriteString(c.Paint(Red, body) + nl)
		default:
			b.WriteString(line)
		}
	}
	return b.String()
}
