package web

import (
	"path/filepath"
	"strings"
	"sync"

	"github.com/alecthomas/chroma/v2"
	"github.com/alecthomas/chroma/v2/lexers"
)

// Limits on what is highlighted: the content is the model's (hostile),
// and the lexers are regular expressions that backtrack. Longer lines,
// and hunks larger than this, are shown plain.
const (
	highlightMaxLine = 1000
	highlightMaxHunk = 256 << 10
)

// tok is a highlighted piece of a diff line: its text and its class
// ("" for plain text). Classes are fixed names (app.css styles them):
// never a style attribute, so the CSP's style-src 'self' holds.
type tok struct {
	C string
	T string
}

// tokClass is the console's class for a chroma token type, "" for the
// types it leaves plain.
func tokClass(t chroma.TokenType) string {
	switch {
	case t.InCategory(chroma.Comment):
		return "hl-c"
	case t == chroma.KeywordType || t == chroma.NameClass:
		return "hl-t"
	case t.InCategory(chroma.Keyword):
		return "hl-k"
	case t.InSubCategory(chroma.LiteralString):
		return "hl-s"
	case t.InSubCategory(chroma.LiteralNumber):
		return "hl-n"
	case t == chroma.NameFunction || t == chroma.NameFunctionMagic:
		return "hl-f"
	case t == chroma.NameBuiltin || t == chroma.NameBuiltinPseudo:
		return "hl-b"
	}
	return ""
}

// lexerCacheSize bounds the lexers remembered by file name pattern: the
// names are the model's, so the map must not grow without end.
const lexerCacheSize = 256

// lexerCache remembers which lexer claims a file name (its extension,
// or its whole name when it has none): finding one globs every lexer's
// patterns, which costs more than lexing a page.
type lexerCache struct {
	mu sync.Mutex // guards m
	m  map[string]chroma.Lexer
}

// lexerFor is the lexer for a file by its name, nil for one no lexer
// claims (shown plain).
func (c *lexerCache) lexerFor(path string) chroma.Lexer {
	base := filepath.Base(path)
	key := filepath.Ext(base)
	if key == "" || key == base {
		key = base
	} else {
		key = "*" + key
	}
	c.mu.Lock()
	l, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return l
	}
	if m := lexers.Match(base); m != nil {
		l = chroma.Coalesce(m)
	}
	c.mu.Lock()
	if len(c.m) < lexerCacheSize {
		c.m[key] = l
	}
	c.mu.Unlock()
	return l
}

// tokenise splits text (lines joined by "\n") into per-line tokens;
// false when the lexer fails or gives back other text than it was given.
func tokenise(l chroma.Lexer, lines []string) ([][]tok, bool) {
	if len(lines) == 0 {
		return nil, false
	}
	text := strings.Join(lines, "\n")
	it, err := l.Tokenise(&chroma.TokeniseOptions{State: "root", EnsureLF: false}, text)
	if err != nil {
		return nil, false
	}
	out := make([][]tok, 1, len(lines))
	for t := it(); t != chroma.EOF; t = it() {
		c := tokClass(t.Type)
		for i, part := range strings.Split(t.Value, "\n") {
			if i > 0 {
				out = append(out, nil)
			}
			if part != "" {
				out[len(out)-1] = append(out[len(out)-1], tok{C: c, T: part})
			}
		}
	}
	// A lexer may add a final newline.
	for len(out) > len(lines) && len(out[len(out)-1]) == 0 {
		out = out[:len(out)-1]
	}
	if len(out) != len(lines) {
		return nil, false
	}
	for i, ts := range out {
		var b strings.Builder
		for _, t := range ts {
			b.WriteString(t.T)
		}
		if b.String() != lines[i] {
			return nil, false
		}
	}
	return out, true
}

// highlight sets the tokens of the content lines of a page of a unified
// diff, each hunk's old side (context and deletions) and new side
// (context and additions) lexed as one text by the language of its
// file's name, so a construct spanning lines (a block comment) is seen
// whole within its hunk. path is the file the page starts in (a page
// may begin inside a file's hunks), "" when it starts at a header.
func (c *lexerCache) highlight(lines []diffLine, path string) {
	var lexer chroma.Lexer
	if path != "" {
		lexer = c.lexerFor(path)
	}
	start := -1 // the first content line of the hunk under way
	flush := func(end int) {
		if start < 0 || lexer == nil {
			start = -1
			return
		}
		hunk := lines[start:end]
		start = -1
		var oldIdx, newIdx []int
		var oldText, newText []string
		size := 0
		for i, l := range hunk {
			if len(l.Text) > highlightMaxLine || strings.HasPrefix(l.Text, "\\") {
				continue
			}
			size += len(l.Text)
			body := l.Text[min(1, len(l.Text)):]
			if l.Class == "ctx" || l.Class == "del" {
				oldIdx, oldText = append(oldIdx, i), append(oldText, body)
			}
			if l.Class == "ctx" || l.Class == "add" {
				newIdx, newText = append(newIdx, i), append(newText, body)
			}
		}
		if size > highlightMaxHunk {
			return
		}
		if toks, ok := tokenise(lexer, oldText); ok {
			for j, i := range oldIdx {
				if hunk[i].Class == "del" {
					hunk[i].Toks = toks[j]
				}
			}
		}
		if toks, ok := tokenise(lexer, newText); ok {
			for j, i := range newIdx {
				hunk[i].Toks = toks[j]
			}
		}
	}
	for i, l := range lines {
		switch l.Class {
		case "file":
			flush(i)
			if p := headerPath(l.Text); p != "" {
				lexer = c.lexerFor(p)
			}
		case "hunk":
			flush(i)
		default:
			if start < 0 {
				start = i
			}
		}
	}
	flush(len(lines))
}

// headerPath is the file a diff's "+++" (or "---") header names, "" for
// another line or /dev/null.
func headerPath(line string) string {
	if p, ok := strings.CutPrefix(line, "+++ "); ok && p != "/dev/null" {
		return strings.TrimPrefix(p, "b/")
	}
	if p, ok := strings.CutPrefix(line, "--- "); ok && p != "/dev/null" {
		return strings.TrimPrefix(p, "a/")
	}
	return ""
}

// pathBefore is the file the diff is in at line lo: the last header
// before it.
func pathBefore(all []string, lo int) string {
	for i := min(lo, len(all)) - 1; i >= 0; i-- {
		if classify(all[i]) == "file" {
			if p := headerPath(all[i]); p != "" {
				return p
			}
		}
	}
	return ""
}
