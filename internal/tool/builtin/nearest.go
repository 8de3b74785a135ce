package builtin

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/spell"
)

// The nearest match: the window of the file's lines most like the lines a
// model expected, scored line by line by edit distance. The work is
// bounded whatever the inputs: a cheap pass over every window counts equal
// lines (hashed), then at most refineWindows windows (the best of the cheap
// pass and those around the expected line) are scored by edit distance on
// at most refineLines lines of refineBytes bytes each.
const (
	refineWindows = 24
	refineLines   = 64
	refineBytes   = 96
	showLines     = 40
)

type match struct {
	at    int     // first line (0-based)
	n     int     // window length
	score float64 // sum of line similarities, 0..len(old)
	equal int     // lines exactly equal
}

// nearestWindow returns the window of len(old) lines of lines that is most
// like old; want is the expected first line (or -1), preferred on ties.
func nearestWindow(lines, old []string, want int) match {
	n := len(old)
	if n == 0 || len(lines) == 0 {
		return match{}
	}
	if n > len(lines) {
		n = len(lines)
	}
	seed := maphash.MakeSeed()
	hash := func(s string) (uint64, uint64) {
		return maphash.String(seed, s), maphash.String(seed, strings.TrimSpace(s))
	}
	lh, lt := make([]uint64, len(lines)), make([]uint64, len(lines))
	for i, l := range lines {
		lh[i], lt[i] = hash(l)
	}
	oh, ot := make([]uint64, n), make([]uint64, n)
	for i := range n {
		oh[i], ot[i] = hash(old[i])
	}
	// Cheap pass: 2 per equal line, 1 per line equal but for indentation.
	windows := len(lines) - n + 1
	cheap := make([]int, windows)
	for i := range windows {
		s := 0
		for j := range n {
			switch {
			case lh[i+j] == oh[j]:
				s += 2
			case lt[i+j] == ot[j]:
				s++
			}
		}
		cheap[i] = s
	}
	order := make([]int, windows)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cheap[b] - cheap[a] })
	cands := order[:min(len(order), refineWindows)]
	if want >= 0 {
		for d := -2; d <= 2; d++ {
			if w := want + d; w >= 0 && w < windows && !slices.Contains(cands, w) {
				cands = append(cands, w)
			}
		}
	}
	best := match{at: -1}
	for _, i := range cands {
		m := match{at: i, n: n}
		for j := range n {
			switch {
			case lines[i+j] == old[j]:
				m.score++
				m.equal++
			case j < refineLines:
				m.score += similarity(lines[i+j], old[j])
			}
		}
		if best.at < 0 || m.score > best.score+1e-9 || (m.score > best.score-1e-9 && want >= 0 && abs(i-want) < abs(best.at-want)) {
			best = m
		}
	}
	if best.score < 0.5 {
		return match{}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// similarity is 1 - (edit distance / longer length) on the lines with
// their indentation trimmed (cut at refineBytes), in [0, 1); lines equal
// but for indentation score 0.9.
func similarity(a, b string) float64 {
	ta, tb := strings.TrimSpace(a), strings.TrimSpace(b)
	if ta == tb {
		if ta == "" {
			return 0.5
		}
		return 0.9
	}
	ta, tb = ta[:min(len(ta), refineBytes)], tb[:min(len(tb), refineBytes)]
	longer := max(len(ta), len(tb))
	s := 1 - float64(spell.Levenshtein(ta, tb))/float64(longer)
	// A fragment of a line (an old text that is not whole lines) scores
	// by how well it matches somewhere inside the line.
	short, long := ta, tb
	if len(short) > len(long) {
		short, long = long, short
	}
	if len(short) > 0 {
		s = max(s, (1-float64(substringDistance(short, long))/float64(len(short)))*0.9)
	}
	return min(s*0.85, 0.85)
}

// substringDistance is the edit distance from p to the closest substring
// of t (Sellers' algorithm).
func substringDistance(p, t string) int {
	prev := make([]int, len(t)+1) // row 0: a match may start anywhere
	cur := make([]int, len(t)+1)
	for i := 1; i <= len(p); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if p[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return slices.Min(prev)
}

// show renders the match with line numbers; lines that differ from the
// expected ones are marked "!" and followed by what was expected.
func (m match) show(lines, old []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The nearest match is at lines %d-%d (%d of %d lines equal); lines marked ! differ, each followed by what you expected:\n", m.at+1, m.at+m.n, m.equal, len(old))
	for j := range m.n {
		if j == showLines {
			fmt.Fprintf(&b, "  … (%d more lines)\n", m.n-j)
			break
		}
		got := lines[m.at+j]
		if got == old[j] {
			fmt.Fprintf(&b, "  %6d  %s\n", m.at+j+1, got)
			continue
		}
		fmt.Fprintf(&b, "! %6d  %s\n", m.at+j+1, got)
		if strings.TrimSpace(got) == strings.TrimSpace(old[j]) {
			fmt.Fprintf(&b, "  expected %s; the file has %s (whitespace differs)\n", quoteLine(old[j]), quoteLine(got))
			continue
		}
		fmt.Fprintf(&b, "  expected %s\n", quoteLine(old[j]))
	}
	if len(old) > m.n {
		fmt.Fprintf(&b, "  (you expected %d more lines after the end of the file)\n", len(old)-m.n)
	}
	b.WriteString("Copy the file's lines exactly (read them with fs.read) and try again.")
	return b.String()
}

// quoteLine shows a line so that whitespace differences are visible.
func quoteLine(s string) string {
	q := fmt.Sprintf("%q", s)
	if len(q) > 200 {
		q = q[:200] + "…"
	}
	return q
}
