package memory

import (
	"strings"
	"unicode/utf8"
)

// Chunking limits. A chunk is at most MaxChunkBytes of text; a chunk cut
// for size repeats up to overlapBytes of its predecessor's end, so a
// passage that straddles the cut is whole in one of them.
const (
	MaxChunkBytes = 1500
	overlapBytes  = 300
	// MaxFileBytes is the largest memory file indexed; a larger one is
	// refused (Skip) rather than read whole.
	MaxFileBytes = 8 << 20
)

// Chunk is one indexed passage of a memory file.
type Chunk struct {
	// Heading is the chain of Markdown headings above the passage,
	// outermost first, joined by " > ".
	Heading string
	// StartLine and EndLine are the passage's 1-based lines, inclusive.
	StartLine, EndLine int
	Text               string
}

// unit is a paragraph, or a piece of one too big for a chunk.
type unit struct {
	start, end int
	text       string
}

// Split cuts Markdown into chunks: a heading starts a new chunk, and a
// section's paragraphs are packed into chunks of at most max bytes. A
// paragraph over max is cut at lines, and a line over max at rune
// boundaries, so no chunk exceeds max whatever the input.
func Split(src string, max int) []Chunk {
	if max <= 0 {
		max = MaxChunkBytes
	}
	var (
		out      []Chunk
		heads    []string // heading chain by level
		heading  string
		units    []unit
		para     []string
		paraFrom int
	)
	flushPara := func() {
		if len(para) > 0 {
			units = append(units, paraUnits(para, paraFrom, max)...)
			para = nil
		}
	}
	flushSection := func() {
		flushPara()
		out = append(out, pack(units, heading, max)...)
		units = nil
	}
	lines := strings.Split(src, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	inFence := false
	for i, ln := range lines {
		n := i + 1
		ln = strings.TrimRight(ln, "\r")
		trim := strings.TrimSpace(ln)
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			inFence = !inFence
		}
		if level := headingLevel(ln); level > 0 && !inFence {
			flushSection()
			title := strings.TrimSpace(strings.TrimLeft(trim, "#"))
			if level > len(heads) {
				heads = append(heads, make([]string, level-len(heads))...)
			}
			heads = append(heads[:level-1], title)
			heading = joinHeads(heads)
			units = append(units, unit{n, n, cutRunes(ln, max)})
			continue
		}
		if trim == "" && !inFence {
			flushPara()
			continue
		}
		if len(para) == 0 {
			paraFrom = n
		}
		para = append(para, ln)
	}
	flushSection()
	return out
}

func headingLevel(ln string) int {
	n := 0
	for n < len(ln) && ln[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || (n < len(ln) && ln[n] != ' ' && ln[n] != '\t') {
		return 0
	}
	return n
}

func joinHeads(h []string) string {
	var parts []string
	for _, s := range h {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " > ")
}

// paraUnits is a paragraph as one unit, or cut into units of at most max
// bytes at line (and, for a longer line, rune) boundaries.
func paraUnits(lines []string, from, max int) []unit {
	text := strings.Join(lines, "\n")
	if len(text) <= max {
		return []unit{{from, from + len(lines) - 1, text}}
	}
	var out []unit
	for i, ln := range lines {
		n := from + i
		for len(ln) > max {
			cut := max
			for cut > 0 && !utf8.RuneStart(ln[cut]) {
				cut--
			}
			if cut == 0 {
				cut = max
			}
			out = append(out, unit{n, n, ln[:cut]})
			ln = ln[cut:]
		}
		if ln != "" {
			out = append(out, unit{n, n, ln})
		}
	}
	return out
}

// pack joins a section's units into chunks of at most max bytes, each
// chunk cut for size starting with its predecessor's last units up to
// overlapBytes.
func pack(units []unit, heading string, max int) []Chunk {
	var (
		out []Chunk
		cur []unit
		sz  int
	)
	emit := func() {
		if len(cur) == 0 {
			return
		}
		parts := make([]string, len(cur))
		for i, u := range cur {
			parts[i] = u.text
		}
		out = append(out, Chunk{Heading: heading, StartLine: cur[0].start, EndLine: cur[len(cur)-1].end, Text: strings.Join(parts, "\n\n")})
	}
	for _, u := range units {
		if len(cur) > 0 && sz+2+len(u.text) > max {
			emit()
			// Carry the tail as overlap, within overlapBytes and so that
			// the new unit still fits.
			var keep []unit
			ksz := 0
			for i := len(cur) - 1; i >= 0; i-- {
				l := len(cur[i].text) + 2
				if ksz+l > overlapBytes || ksz+l+len(u.text) > max {
					break
				}
				keep = append([]unit{cur[i]}, keep...)
				ksz += l
			}
			cur, sz = keep, ksz
		}
		cur = append(cur, u)
		sz += len(u.text) + 2
	}
	emit()
	return out
}

// cutRunes shortens s to at most max bytes at a rune boundary.
func cutRunes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}
