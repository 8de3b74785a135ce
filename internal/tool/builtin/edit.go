package builtin

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// fs.edit's two modes: an exact old/new replacement (old must occur once)
// or a unified diff whose hunks must apply cleanly. Unified diffs are
// parsed by github.com/bluekeyes/go-gitdiff (git's and GNU diff's
// formats); locating the hunks and explaining failures is done here, so a
// model gets the file, the line and the nearest match in the error.

// Limits on model-supplied diffs.
const (
	maxPatchFiles = 50
	maxHunks      = 500
)

// EditError is fs.edit's refusal to edit: the file, the line (1-based, 0
// when not tied to a line) and a message written for the model, which
// includes the nearest match when there is one.
type EditError struct {
	Path string
	Line int
	Msg  string
}

func (e *EditError) Error() string {
	name := e.Path
	if name != "" {
		name = showName(name)
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", name, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", name, e.Msg)
}

// filePatch is one file's part of a unified diff.
type filePatch struct {
	Path   string // as named by the diff, a/ or b/ stripped
	New    bool   // created (--- /dev/null)
	Delete bool   // deleted (+++ /dev/null)
	Hunks  []*gitdiff.TextFragment
}

var diffLineNo = regexp.MustCompile(`^gitdiff: line (\d+): `)

// parsePatch parses a unified diff. A diff of hunks only ("@@ ..." with
// no ---/+++ header) is about defaultPath. Renames, copies, binary
// patches and mode changes are refused: fs.edit edits text.
func parsePatch(diff, defaultPath string) ([]filePatch, error) {
	diff = recountHunks(diff)
	body := diff
	shift := 0
	if !hasFileHeader(diff) {
		if !strings.Contains(diff, "@@ -") {
			return nil, errors.New("the diff has no hunk (a line starting with \"@@ -\"): give a unified diff, or use old/new")
		}
		if defaultPath == "" {
			return nil, errors.New("the diff has no ---/+++ file header: name the file with path, or start the diff with \"--- a/FILE\" and \"+++ b/FILE\"")
		}
		// Text before the first hunk is dropped, as a preamble would be.
		i := strings.Index(diff, "@@ -")
		if i > 0 && diff[i-1] != '\n' {
			return nil, errors.New("the diff's first \"@@\" is not at the start of a line")
		}
		shift = 2 - strings.Count(diff[:i], "\n")
		body = "--- a/" + defaultPath + "\n+++ b/" + defaultPath + "\n" + diff[i:]
	}
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	files, _, err := gitdiff.Parse(strings.NewReader(body))
	if err != nil {
		msg := err.Error()
		if m := diffLineNo.FindStringSubmatch(msg); m != nil {
			n, _ := strconv.Atoi(m[1])
			msg = fmt.Sprintf("line %d of the diff: %s", n-shift, msg[len(m[0]):])
		}
		return nil, fmt.Errorf("the diff does not parse: %s", msg)
	}
	if len(files) == 0 {
		return nil, errors.New("the diff names no file: start it with \"--- a/FILE\" and \"+++ b/FILE\" lines, then \"@@\" hunks")
	}
	if len(files) > maxPatchFiles {
		return nil, fmt.Errorf("the diff changes %d files; at most %d per call", len(files), maxPatchFiles)
	}
	out := make([]filePatch, 0, len(files))
	hunks := 0
	seen := map[string]bool{}
	for _, f := range files {
		name := f.NewName
		if f.IsDelete || name == "" {
			name = f.OldName
		}
		if !strings.Contains(body, "diff --git a/"+name+" ") {
			// Traditional headers keep git's a/ and b/ (the parser strips
			// them from "diff --git" headers only).
			name = stripSide(name)
		}
		switch {
		case name == "":
			return nil, errors.New("the diff has a file without a name")
		case f.IsRename || f.IsCopy:
			return nil, fmt.Errorf("%s: fs.edit does not rename or copy files: write the new file with fs.write", name)
		case f.IsBinary:
			return nil, fmt.Errorf("%s: fs.edit does not apply binary patches", name)
		case f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode:
			return nil, fmt.Errorf("%s: fs.edit does not change modes", name)
		case seen[name]:
			return nil, fmt.Errorf("%s: the diff names this file twice: give all its hunks under one header", name)
		case len(f.TextFragments) == 0 && !f.IsNew && !f.IsDelete:
			return nil, fmt.Errorf("%s: the diff has no hunk for this file", name)
		}
		seen[name] = true
		hunks += len(f.TextFragments)
		if hunks > maxHunks {
			return nil, fmt.Errorf("the diff has more than %d hunks", maxHunks)
		}
		out = append(out, filePatch{Path: name, New: f.IsNew, Delete: f.IsDelete, Hunks: f.TextFragments})
	}
	return out, nil
}

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$`)

// bareHunk marks a hunk whose header had no line numbers ("@@" alone).
const bareHunk = " (no line numbers)"

// recountHunks rewrites every hunk header's line counts from the hunk's
// own lines, and gives a header without line numbers ("@@", "@@ @@")
// the position 1 (0 when the hunk has no old lines): models count lines
// badly, and a hunk is located by its content anyway. Trailing blank
// lines after the last hunk are dropped. The line count is unchanged, so
// parse errors still name the model's lines.
func recountHunks(diff string) string {
	lines := strings.Split(strings.TrimRight(diff, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "@@") {
			continue
		}
		oldStart, newStart, rest, bare := "", "", "", false
		if m := hunkHeader.FindStringSubmatch(l); m != nil {
			if countsHold(m[2], m[4], lines[i+1:]) {
				continue // a correct header stays as written
			}
			oldStart, newStart, rest = m[1], m[3], m[5]
		} else if strings.HasPrefix(l, "@@ -") {
			continue // a malformed header with numbers: the parser explains
		} else {
			bare = true
		}
		nOld, nNew, keep := 0, 0, false
	body:
		for j := i + 1; j < len(lines); j++ {
			b := lines[j]
			switch {
			case strings.HasPrefix(b, "@@"), strings.HasPrefix(b, "diff --git "),
				strings.HasPrefix(b, "--- ") && j+1 < len(lines) && strings.HasPrefix(lines[j+1], "+++ "):
				break body
			case b == "" || b[0] == ' ':
				nOld++
				nNew++
			case b[0] == '-':
				nOld++
			case b[0] == '+':
				nNew++
			case b[0] == '\\':
			default:
				if strayLine(lines[j+1:]) {
					// A bad line inside the hunk, not its end: leave
					// the header for the parser to report the line.
					keep = true
				}
				break body
			}
		}
		if keep && !bare {
			continue
		}
		if bare {
			oldStart, newStart, rest = "1", "1", bareHunk
			if nOld == 0 {
				oldStart = "0"
			}
			if nNew == 0 {
				newStart = "0"
			}
		}
		lines[i] = fmt.Sprintf("@@ -%s,%d +%s,%d @@%s", oldStart, nOld, newStart, nNew, rest)
	}
	return strings.Join(lines, "\n") + "\n"
}

// countsHold reports whether a header's counts (empty means 1) walk
// exactly over hunk lines.
func countsHold(oldN, newN string, rest []string) bool {
	count := func(s string) int {
		if s == "" {
			return 1
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return -1
		}
		return n
	}
	o, n := count(oldN), count(newN)
	if o < 0 || n < 0 {
		return false
	}
	for _, l := range rest {
		if o == 0 && n == 0 {
			return true
		}
		switch {
		case l == "" || l[0] == ' ':
			o--
			n--
		case l[0] == '-':
			o--
		case l[0] == '+':
			n--
		case l[0] == '\\':
		default:
			return false
		}
		if o < 0 || n < 0 {
			return false
		}
	}
	return o == 0 && n == 0
}

// strayLine reports whether hunk lines follow (before the next header):
// the line before them was a bad line inside a hunk.
func strayLine(rest []string) bool {
	for _, l := range rest {
		switch {
		case strings.HasPrefix(l, "@@"), strings.HasPrefix(l, "diff --git "), strings.HasPrefix(l, "--- "):
			return false
		case l != "" && (l[0] == '+' || l[0] == '-' || l[0] == ' '):
			return true
		}
	}
	return false
}

// hasFileHeader reports whether diff has a "diff --git" or a "--- "/"+++ "
// header line pair before its first hunk.
func hasFileHeader(diff string) bool {
	head := diff
	if i := strings.Index(diff, "\n@@ -"); i >= 0 {
		head = diff[:i+1]
	} else if strings.HasPrefix(diff, "@@ -") {
		return false
	}
	return strings.HasPrefix(head, "diff --git ") || strings.Contains(head, "\ndiff --git ") ||
		((strings.HasPrefix(head, "--- ") || strings.Contains(head, "\n--- ")) && strings.Contains(head, "\n+++ "))
}

// stripSide removes git's a/ or b/ prefix.
func stripSide(name string) string {
	if strings.HasPrefix(name, "a/") || strings.HasPrefix(name, "b/") {
		return name[2:]
	}
	return name
}

// text is a file split into lines without their newlines; final says
// whether the last line ended with one, crlf whether every line ends with
// "\r\n" (a Windows file: diffs match its lines without the "\r", and
// the result keeps "\r\n").
type text struct {
	lines []string
	final bool
	crlf  bool
}

func splitText(s string) text {
	if s == "" {
		return text{}
	}
	t := text{final: strings.HasSuffix(s, "\n")}
	t.lines = strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	t.crlf = t.final
	for _, l := range t.lines {
		if !strings.HasSuffix(l, "\r") {
			t.crlf = false
			break
		}
	}
	if t.crlf {
		for i, l := range t.lines {
			t.lines[i] = strings.TrimSuffix(l, "\r")
		}
	}
	return t
}

func (t text) String() string {
	if len(t.lines) == 0 {
		return ""
	}
	nl := "\n"
	if t.crlf {
		nl = "\r\n"
	}
	s := strings.Join(t.lines, nl)
	if t.final {
		s += nl
	}
	return s
}

// hunkSides returns a hunk's old lines (context and removed) and new lines
// (context and added) without newlines, and whether each side's last line
// lacks its newline ("\ No newline at end of file").
func hunkSides(h *gitdiff.TextFragment) (old, new []string, oldNoNL, newNoNL bool) {
	for _, l := range h.Lines {
		s := strings.TrimSuffix(l.Line, "\n")
		noNL := !strings.HasSuffix(l.Line, "\n")
		switch l.Op {
		case gitdiff.OpContext:
			old, new = append(old, s), append(new, s)
			oldNoNL, newNoNL = noNL, noNL
		case gitdiff.OpDelete:
			old = append(old, s)
			oldNoNL = noNL
		case gitdiff.OpAdd:
			new = append(new, s)
			newNoNL = noNL
		}
	}
	return old, new, oldNoNL, newNoNL
}

// applyHunks applies a file's hunks to content. Every hunk's old lines
// must occur exactly in the file, after the previous hunk: at the line its
// header names, or, when the line numbers are off, at the one other place
// they occur (several other places are ambiguous and refused). Line
// numbers in errors are the file's as it is now.
func applyHunks(path, content string, hunks []*gitdiff.TextFragment) (string, error) {
	t := splitText(content)
	type placed struct {
		at, n int
		new   []string
	}
	var plan []placed
	next := 0   // the first line a hunk may start at
	offset := 0 // how far the previous hunk was found from its header
	final := t.final
	for i, h := range hunks {
		old, new, oldNoNL, newNoNL := hunkSides(h)
		if t.crlf {
			trimCR(old)
			trimCR(new)
		}
		label := fmt.Sprintf("hunk %d of %d (%s)", i+1, len(hunks), strings.TrimSpace(h.Header()))
		want := int(h.OldPosition) - 1 + offset
		if len(old) == 0 && strings.HasSuffix(h.Comment, strings.TrimSpace(bareHunk)) && len(t.lines) > 0 {
			return "", &EditError{Path: path, Msg: fmt.Sprintf("%s has no context or removed lines and no line numbers: nothing says where to insert; add context lines", label)}
		}
		if len(old) == 0 {
			// Pure insertion: after line OldPosition.
			want = int(h.OldPosition) + offset
			if want < next || want > len(t.lines) {
				return "", &EditError{Path: path, Msg: fmt.Sprintf("%s inserts after line %d, but the file has %d lines (and earlier hunks end at line %d)", label, h.OldPosition, len(t.lines), next)}
			}
			plan = append(plan, placed{at: want, new: new})
			if want == len(t.lines) && len(new) > 0 {
				final = !newNoNL
			}
			next = want
			continue
		}
		at, err := locate(path, t.lines, old, want, next, label)
		if err != nil {
			return "", err
		}
		offset = at - (int(h.OldPosition) - 1)
		if at+len(old) == len(t.lines) {
			// The hunk reaches the end of the file: it decides the final
			// newline when it says so, else the file keeps its own.
			if oldNoNL || newNoNL {
				final = !newNoNL
			}
			if len(new) == 0 {
				final = t.final
			}
		}
		plan = append(plan, placed{at: at, n: len(old), new: new})
		next = at + len(old)
	}
	var out []string
	pos := 0
	for _, p := range plan {
		out = append(out, t.lines[pos:p.at]...)
		out = append(out, p.new...)
		pos = p.at + p.n
	}
	out = append(out, t.lines[pos:]...)
	if len(out) == 0 {
		return "", nil
	}
	return text{lines: out, final: final, crlf: t.crlf}.String(), nil
}

func trimCR(lines []string) {
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
}

// locate finds old in lines at or after from, preferring want.
func locate(path string, lines, old []string, want, from int, label string) (int, error) {
	if want >= from && want+len(old) <= len(lines) && equalAt(lines, want, old) {
		return want, nil
	}
	var at []int
	for i := from; i+len(old) <= len(lines); i++ {
		if equalAt(lines, i, old) {
			at = append(at, i)
		}
	}
	switch {
	case slices.Contains(at, want):
		return want, nil
	case len(at) == 1:
		return at[0], nil
	case len(at) > 1:
		return 0, &EditError{Path: path, Line: at[0] + 1, Msg: fmt.Sprintf("%s: its old lines do not occur at line %d but at %d places (lines %s): fix the line numbers in the @@ header or add context lines so the place is unique",
			label, want+1, len(at), lineList(at))}
	}
	m := nearestWindow(lines, old, want)
	if m.score == 0 {
		return 0, &EditError{Path: path, Msg: fmt.Sprintf("%s does not apply: none of its old lines (context and removed) occur in the file; read the file with fs.read and rebuild the diff", label)}
	}
	return 0, &EditError{Path: path, Line: m.at + 1, Msg: fmt.Sprintf("%s does not apply: its old lines (context and removed) do not occur in the file.\n%s", label, m.show(lines, old))}
}

func equalAt(lines []string, i int, old []string) bool {
	for j, o := range old {
		if lines[i+j] != o {
			return false
		}
	}
	return true
}

func lineList(at []int) string {
	var b strings.Builder
	for i, a := range at {
		if i == 8 {
			fmt.Fprintf(&b, ", … (%d more)", len(at)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(a + 1))
	}
	return b.String()
}

// replaceOnce replaces the single occurrence of old in s. When old occurs
// zero or several times the error says so, with the lines where it occurs
// or the nearest match.
func replaceOnce(path, s, old, new string) (string, error) {
	if old == "" {
		return "", &EditError{Path: path, Msg: "old text is empty: give the exact text to replace, or a diff"}
	}
	switch n := strings.Count(s, old); n {
	case 1:
		return strings.Replace(s, old, new, 1), nil
	case 0:
		want := splitText(old).lines
		lines := splitText(s).lines
		m := nearestWindow(lines, want, -1)
		if m.score == 0 {
			return "", &EditError{Path: path, Msg: "old text not found, and no line of it occurs in the file: read the file with fs.read and copy the text exactly"}
		}
		return "", &EditError{Path: path, Line: m.at + 1, Msg: "old text not found (it must match exactly, including whitespace).\n" + m.show(lines, want)}
	default:
		var at []int
		for i, off := 0, 0; i < n; i++ {
			j := strings.Index(s[off:], old)
			at = append(at, strings.Count(s[:off+j], "\n"))
			off += j + len(old)
		}
		return "", &EditError{Path: path, Line: at[0] + 1, Msg: fmt.Sprintf("old text occurs %d times (at lines %s); include more surrounding lines so it occurs once", n, lineList(at))}
	}
}
