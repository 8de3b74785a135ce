package termsafe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in, want, line string
	}{
		{"plain text", "plain text", "plain text"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab", `two\nlines\tand a tab`},
		{"tidy up\x1b[2J\x1b[HStep 1", `tidy up\x1b[2J\x1b[HStep 1`, `tidy up\x1b[2J\x1b[HStep 1`},
		{"\x1b]52;c;aGk=\x07", `\x1b]52;c;aGk=\a`, `\x1b]52;c;aGk=\a`},
		{"a\rb\bc\x7f", `a\rb\bc\x7f`, `a\rb\bc\x7f`},
		{"crlf\r\n", "crlf\\r\n", `crlf\r\n`},
		{"\u009b2J", `\u009b2J`, `\u009b2J`},
		{"\x9b2J", `\x9b2J`, `\x9b2J`},
		{"\u0085nel", `\u0085nel`, `\u0085nel`},
		{"user\u202e \u2066x\u2069", `user\u202e \u2066x\u2069`, `user\u202e \u2066x\u2069`},
		{"a\u200bb\ufeff", `a\u200bb\ufeff`, `a\u200bb\ufeff`},
		{"tag\U000e0041", `tag\U000e0041`, `tag\U000e0041`},
		{"bad \xff\xc0", `bad \xff\xc0`, `bad \xff\xc0`},
		{"kept: héllo ✓ ✗ 日本 👍 \ufffd", "kept: héllo ✓ ✗ 日本 👍 \ufffd", "kept: héllo ✓ ✗ 日本 👍 \ufffd"},
		{`already \x1b escaped`, `already \x1b escaped`, `already \x1b escaped`},
		{"", "", ""},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := Line(tc.in); got != tc.line {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.line)
		}
		if Safe(tc.in) != (tc.in == tc.want) {
			t.Errorf("Safe(%q) = %v", tc.in, Safe(tc.in))
		}
	}
}

// TestCorpus runs the hostile corpus (testdata/hostile.txt) through
// String and Line.
func TestCorpus(t *testing.T) {
	corpus := Corpus(t)
	if len(corpus) < 30 {
		t.Fatalf("corpus has %d entries", len(corpus))
	}
	for _, s := range corpus {
		checkSafe(t, s, String(s), false)
		checkSafe(t, s, Line(s), true)
	}
}

// Corpus reads testdata/hostile.txt.
func Corpus(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("testdata/hostile.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := strconv.Unquote(line)
		if err != nil {
			t.Fatalf("hostile.txt:%d: %v", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSafe asserts the properties every escaped text has: valid UTF-8,
// no control byte but \n and \t (none on one line), no hidden rune, and
// escaping it again changes nothing.
func checkSafe(t *testing.T, in, out string, oneLine bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("escape(%q) = %q: invalid UTF-8", in, out)
	}
	for _, r := range out {
		if (r == '\n' || r == '\t') && !oneLine {
			continue
		}
		if Hidden(r) {
			t.Fatalf("escape(%q) = %q: holds %U", in, out, r)
		}
	}
	if again := escape(out, oneLine); again != out {
		t.Fatalf("escaping %q again gave %q", out, again)
	}
	if !oneLine && !Safe(out) {
		t.Fatalf("Safe(%q) = false", out)
	}
	if strings.Count(out, "\n") != strings.Count(in, "\n") && !oneLine {
		t.Fatalf("escape(%q) = %q: lines changed", in, out)
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	n, err := w.Write([]byte("a\x1b[2Jb\n"))
	if err != nil || n != 7 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got, want := b.String(), "a\\x1b[2Jb\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range Corpus(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		checkSafe(t, s, out, false)
		checkSafe(t, s, Line(s), true)
		if Safe(s) && out != s {
			t.Fatalf("Safe(%q) but String changed it to %q", s, out)
		}
	})
}

func TestJSON(t *testing.T) {
	for _, s := range append(Corpus(t), "plain", "\u00e9\u65e5\U0001f44d") {
		b, err := json.Marshal(map[string]string{"k": s, s: "v"})
		if err != nil {
			t.Fatal(err)
		}
		out := JSON(b)
		var back, want map[string]string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("JSON(%s) = %s: %v", b, out, err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("JSON(%s) = %s decodes to %q, want %q", b, out, back, want)
		}
		checkSafe(t, string(b), string(out), true)
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range Corpus(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal(%q): %v", s, err) // a string always marshals
		}
		out := JSON(b)
		var back, want string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("JSON(%s) = %s: %v", b, out, err)
		}
		_ = json.Unmarshal(b, &want)
		if back != want {
			t.Fatalf("JSON(%s) = %s decodes to %q, want %q", b, out, back, want)
		}
		checkSafe(t, string(b), string(out), true)
	})
}
