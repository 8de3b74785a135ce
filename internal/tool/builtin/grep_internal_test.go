package builtin

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// naiveScan is the reference: every line, the pattern, in order.
func naiveScan(re *regexp.Regexp, rel, text string, limit int) string {
	var b strings.Builder
	lines := strings.Split(text, "\n")
	if strings.HasSuffix(text, "\n") || text == "" {
		lines = lines[:len(lines)-1] // an empty file has no line
	}
	n := 0
	for i, l := range lines {
		if n >= limit {
			break
		}
		if re.MatchString(l) {
			fmt.Fprintf(&b, "%s:%d:%s\n", rel, i+1, string(appendLine(nil, []byte(l))))
			n++
		}
	}
	return b.String()
}

func TestLineMatcher(t *testing.T) {
	text := "package p\n\nfunc (r *Reader) Read(b []byte) {}\nfunc (w *Writer) Write() {}\n\tx := \"Reader) Read\"\nlast line without newline Read"
	for _, pat := range []string{
		`func \(\w+ \*Reader\) Read\w*\(`, `Reader\) Read`, `^func`, `Read$`, `(?i)READ`, `\Apackage`, `^$`, ``,
		`Writer|Reader`, `(Reader\) )+Read`, `x{0}Read`, `a\nb`, `[^\n]*Write`, `d\z`,
	} {
		m, err := newLineMatcher(pat)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 2, 100} {
			got, n := m.scan("f.go", []byte(text), nil, limit)
			want := naiveScan(m.re, "f.go", text, limit)
			if string(got) != want || n != strings.Count(want, "\n") {
				t.Errorf("%q limit %d:\ngot  %q\nwant %q", pat, limit, got, want)
			}
		}
	}
}

func TestRequiredLiteral(t *testing.T) {
	for pat, want := range map[string]string{
		`func \(\w+ \*Reader\) Read\w*\(`: " *Reader) Read",
		`abc`:                             "abc",
		`(?i)abc`:                         "",
		`a|b`:                             "",
		`(xyz)+q`:                         "xyz",
		`(xyz)*q`:                         "q",
		`x{2}`:                            "x",
		`[ab]cd`:                          "cd",
	} {
		if got := requiredLiteral(pat); got != want {
			t.Errorf("requiredLiteral(%q) = %q, want %q", pat, got, want)
		}
	}
}

// The literal and multi-line shortcuts never change what matches.
func FuzzLineMatcher(f *testing.F) {
	f.Add(`Reader\) Read`, "a\nfunc (r *Reader) Read()\nb Reader) Read")
	f.Add(`^x|y$`, "x\ny\n\nxy")
	f.Add(`(?s)a.b`, "a\nb\naxb")
	f.Add(`\bword\b`, "a word\nwords\n")
	f.Fuzz(func(t *testing.T, pat, text string) {
		if len(pat) > 64 || len(text) > 4096 {
			return
		}
		m, err := newLineMatcher(pat)
		if err != nil {
			return
		}
		got, _ := m.scan("f", []byte(text), nil, 1<<20)
		if want := naiveScan(m.re, "f", text, 1<<20); string(got) != want {
			t.Fatalf("%q on %q:\ngot  %q\nwant %q", pat, text, got, want)
		}
	})
}

// Any .gitignore content parses, and matching never panics.
func FuzzParseIgnore(f *testing.F) {
	f.Add([]byte("*.log\n!keep.log\nbuild/\n/root\na/**/b\nlib/**\n[!x]y\n\\#h\n"), "a/x/b", true)
	f.Add([]byte("\\\n[\n**\n!\n/\n"), "x", false)
	f.Fuzz(func(t *testing.T, content []byte, p string, isDir bool) {
		ig := (&ignores{}).with([]string{"d"}, content)
		ig.match("d/"+strings.Trim(p, "/"), isDir)
		ig.match(p, isDir)
	})
}
