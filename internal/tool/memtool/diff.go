package memtool

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// unifiedDiff is the unified diff of a memory write, for the person asked
// to approve it. A memory write changes one contiguous run of lines (an
// append, or one text replaced once), so the diff is one hunk: the lines
// between the longest common prefix and suffix, with context.
func unifiedDiff(rel string, before, after []byte) string {
	a, b := splitLines(string(before)), splitLines(string(after))
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	start := max(pre-diffContext, 0)
	endA, endB := min(len(a)-suf+diffContext, len(a)), min(len(b)-suf+diffContext, len(b))
	var s strings.Builder
	from := "a/" + rel
	if len(before) == 0 {
		from = "/dev/null"
	}
	fmt.Fprintf(&s, "--- %s\n+++ b/%s\n@@ -%s +%s @@\n", from, rel, hunkRange(start, endA-start), hunkRange(start, endB-start))
	for _, l := range a[start:pre] {
		s.WriteString(" " + l + "\n")
	}
	for _, l := range a[pre : len(a)-suf] {
		s.WriteString("-" + l + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		s.WriteString("+" + l + "\n")
	}
	for _, l := range a[len(a)-suf : endA] {
		s.WriteString(" " + l + "\n")
	}
	return s.String()
}

// hunkRange is a hunk header's "start,count", numbered from 1 (a range
// with no lines is numbered as the line before it, as diff does).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines cuts s into lines without their newlines; a last line
// without one counts as a line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
