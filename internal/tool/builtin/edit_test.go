package builtin

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestReplaceOnce(t *testing.T) {
	for _, c := range []struct {
		name, s, old, new, want, err string
	}{
		{"once", "a\nb\nc\n", "b", "B", "a\nB\nc\n", ""},
		{"twice", "x x", "x", "y", "", "occurs 2 times"},
		{"empty old", "x", "", "y", "", "old text is empty"},
		{"nearest", "func Add(a, b int) int {\n\treturn a - b\n}\n", "return a * b", "", "", "f:2: old text not found"},
		{"nearest, several lines", "one\ntwo\nthree\nfour\n", "two\nthree!", "", "", "nearest match is at lines 2-3"},
		{"nothing alike", "abc", "xyz", "", "", "no line of it occurs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := replaceOnce("f", c.s, c.old, c.new)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("= %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// FuzzReplaceOnce: model-supplied text never makes the edit replace
// anything but exactly one occurrence, and the error path never panics.
func FuzzReplaceOnce(f *testing.F) {
	f.Add("a\nb\nc\n", "b", "B")
	f.Add("x x", "x", "y")
	f.Add("func f() {\n\treturn 1\n}\n", "return 2", "")
	f.Fuzz(func(t *testing.T, s, old, new string) {
		got, err := replaceOnce("f", s, old, new)
		if err != nil {
			return
		}
		if strings.Count(s, old) != 1 || got != strings.Replace(s, old, new, 1) {
			t.Fatalf("replaceOnce(%q, %q, %q) = %q", s, old, new, got)
		}
	})
}

// A large file and a long old text that matches nothing must not make the
// kernel spin: the error comes back quickly (scored on equal lines only).
func TestReplaceOnceLargeInputs(t *testing.T) {
	s := strings.Repeat(strings.Repeat("x", 300)+"\n", 20000)
	old := strings.Repeat(strings.Repeat("y", 300)+"\n", 200)
	if _, err := replaceOnce("f", s, old, ""); err == nil {
		t.Fatal("replaced nothing without an error")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"**/*.go", "x/y/a.txt", false},
		{"cmd/*/main.go", "cmd/fluffy/main.go", true},
		{"cmd/*/main.go", "cmd/a/b/main.go", false},
		{"x/**", "x/a/b", true},
		{"x/**/z", "x/z", true},
		{"*.md", "docs/a.md", false},
	} {
		if got, err := globMatch(c.pat, c.name); err != nil || got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, %v; want %v", c.pat, c.name, got, err, c.want)
		}
	}
	if _, err := globMatch("[", "x"); err == nil {
		t.Error("bad pattern accepted")
	}
	// Many "**" against a deep path that does not match: memoized, fast.
	pat := strings.Repeat("**/a/", 40) + "b"
	name := strings.Repeat("a/", 100) + "c"
	if ok, err := globMatch(pat, name); ok || err != nil {
		t.Errorf("pathological glob = %v, %v", ok, err)
	}
}

// FuzzGlobMatch: model-supplied patterns never panic; "**"-heavy patterns
// are bounded by the path's depth.
func FuzzGlobMatch(f *testing.F) {
	f.Add("**/*.go", "a/b/c.go")
	f.Add("**/**/x/**", "x")
	f.Fuzz(func(t *testing.T, pat, name string) {
		if len(pat) > 200 || len(name) > 200 {
			return
		}
		_, _ = globMatch(pat, name)
	})
}

// The whole-file prefilter never skips a file that has a matching line.
func TestPrefilter(t *testing.T) {
	text := "package x\n\nfunc A() {}\nvar b = 1\n"
	for _, pat := range []string{`^func`, `1$`, `^$`, `\Apackage`, `\Afunc`, `b = \d`, `(?i)FUNC`, `(?-m)^func`, `(?s:.)^func`} {
		re := regexp.MustCompile(pat)
		lineMatch := false
		for _, l := range strings.Split(text, "\n") {
			lineMatch = lineMatch || re.MatchString(l)
		}
		if f := prefilter(pat); f != nil && lineMatch && !f.MatchString(text) {
			t.Errorf("prefilter(%q) skips a file with a matching line", pat)
		}
	}
}

func FuzzPrefilter(f *testing.F) {
	f.Add(`^func`, "package x\nfunc A() {}\n")
	f.Fuzz(func(t *testing.T, pat, text string) {
		re, err := regexp.Compile(pat)
		if err != nil || len(text) > 1000 {
			return
		}
		lineMatch := false
		for _, l := range strings.Split(text, "\n") {
			lineMatch = lineMatch || re.MatchString(l)
		}
		if p := prefilter(pat); p != nil && lineMatch && !p.MatchString(text) {
			t.Fatalf("prefilter(%q) skips %q", pat, text)
		}
	})
}

func asEditError(err error, target **EditError) bool { return errors.As(err, target) }
