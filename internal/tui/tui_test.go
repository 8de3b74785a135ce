package tui

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func TestPasteFilter(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "hello\r", "hello\r"},
		{"paste", "a" + PasteStart + "one\ntwo\r\nthree\rfour" + PasteEnd + "\r", "aone␤two␤three␤four\r"},
		{"arrow keys pass", "\x1b[A\x1b[Bx", "\x1b[A\x1b[Bx"},
		{"end marker outside a paste passes", PasteEnd, PasteEnd},
		{"partial marker at eof", "x\x1b[20", "x\x1b[20"},
		{"two pastes", PasteStart + "a\n" + PasteEnd + "\r" + PasteStart + "b\nc" + PasteEnd, "a␤\rb␤c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(c.in), iotest.OneByteReader(strings.NewReader(c.in))} {
				got, err := io.ReadAll(NewPasteFilter(r))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != c.want {
					t.Errorf("got %q, want %q", got, c.want)
				}
			}
		})
	}
	if Unmark("a␤b") != "a\nb" {
		t.Error("Unmark")
	}
}

// FuzzPasteFilter: any input, read in any chunking, gives the same output;
// outside a paste nothing changes, and no marker survives inside one.
func FuzzPasteFilter(f *testing.F) {
	f.Add([]byte("x" + PasteStart + "a\r\nb" + PasteEnd + "\r"))
	f.Add([]byte("\x1b[200\x1b[201~\x1b"))
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, err := io.ReadAll(NewPasteFilter(bytes.NewReader(in)))
		if err != nil {
			t.Fatal(err)
		}
		bytewise, err := io.ReadAll(NewPasteFilter(iotest.OneByteReader(bytes.NewReader(in))))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole, bytewise) {
			t.Fatalf("chunking changes the output: %q vs %q", whole, bytewise)
		}
		if !bytes.Contains(in, []byte(PasteStart)) && !bytes.Equal(whole, in) {
			t.Fatalf("no paste, yet changed: %q -> %q", in, whole)
		}
	})
}

const sampleDiff = `diff --git a/calc.py b/calc.py
new file mode 100644
--- /dev/null
+++ b/calc.py
@@ -0,0 +1,2 @@
+def add(a, b):
+    return a + b
diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1,2 +1,2 @@
 # calc
-old line
+new line
diff --git a/logo.png b/logo.png
new file mode 100644
Binary files /dev/null and b/logo.png differ
diff --git "a/we\"ird name" "b/we\"ird name"
new file mode 100644
--- /dev/null
+++ "b/we\"ird name"
@@ -0,0 +1 @@
+x
`

func TestSplitDiffAndStat(t *testing.T) {
	files := SplitDiff(sampleDiff)
	want := []FileDiff{{Path: "calc.py", Added: 2}, {Path: "README.md", Added: 1, Deleted: 1}, {Path: "logo.png", Binary: true}, {Path: `we"ird name`, Added: 1}}
	if len(files) != len(want) {
		t.Fatalf("got %d files: %+v", len(files), files)
	}
	for i, w := range want {
		g := files[i]
		if g.Path != w.Path || g.Added != w.Added || g.Deleted != w.Deleted || g.Binary != w.Binary {
			t.Errorf("file %d: got %+v, want %+v", i, g, w)
		}
		if !strings.HasPrefix(g.Text, "diff --git") {
			t.Errorf("file %d: text %q", i, g.Text)
		}
	}
	if got := SplitDiff("junk before\n" + sampleDiff); len(got) != 4 {
		t.Errorf("leading junk: %d files", len(got))
	}
	st := Stat(Caps{}, files, 80)
	for _, w := range []string{" calc.py     |    2 ++\n", " README.md   |    2 +-\n", " logo.png    | Bin\n", "4 files changed, 4 insertions(+), 1 deletion(-)"} {
		if !strings.Contains(st, w) {
			t.Errorf("stat lacks %q:\n%s", w, st)
		}
	}
	// Bars scale to the width.
	big := SplitDiff("diff --git a/x b/x\n@@ -1 +1 @@\n" + strings.Repeat("+a\n", 500))
	if line := strings.SplitN(Stat(Caps{}, big, 40), "\n", 2)[0]; len(line) > 45 {
		t.Errorf("bar not scaled: %q", line)
	}
}

func FuzzSplitDiff(f *testing.F) {
	f.Add(sampleDiff)
	f.Add("diff --git \"a/x")
	f.Fuzz(func(t *testing.T, d string) {
		files := SplitDiff(d)
		var total int
		for _, fd := range files {
			total += len(fd.Text)
			if !strings.HasPrefix(fd.Text, "diff --git ") {
				t.Fatalf("section %q", fd.Text)
			}
		}
		if total > len(d) {
			t.Fatalf("sections longer than the input")
		}
		_ = Stat(Caps{Color: true}, files, 80)
	})
}

func TestBar(t *testing.T) {
	var out bytes.Buffer
	b := NewBar(&out, func() (int, int, error) { return 40, 10, nil })
	b.Set("model x")
	if out.Len() != 0 {
		t.Fatalf("drew while off: %q", out.String())
	}
	b.Start()
	s := out.String()
	if !strings.Contains(s, "\x1b[1;9r") || !strings.Contains(s, "\x1b[10;1H") || !strings.Contains(s, "model x") {
		t.Fatalf("start: %q", s)
	}
	out.Reset()
	b.Set(strings.Repeat("y", 100))
	if strings.Contains(out.String(), strings.Repeat("y", 38)) || !strings.Contains(out.String(), "…") {
		t.Errorf("not clipped to the width: %q", out.String())
	}
	out.Reset()
	b.Stop()
	if !strings.Contains(out.String(), "\x1b[r") || b.On() {
		t.Errorf("stop: %q", out.String())
	}
	small := NewBar(&out, func() (int, int, error) { return 40, 3, nil })
	small.Start()
	if small.On() {
		t.Error("a 3-row terminal got a bar")
	}
}

func TestPaintAndDetect(t *testing.T) {
	if (Caps{}).Paint(Red, "x") != "x" {
		t.Error("painted without colour")
	}
	if (Caps{Color: true}).Paint(Red, "x") != "\x1b[31mx\x1b[0m" {
		t.Error("paint")
	}
	env := func(string) (string, bool) { return "", false }
	if c := Detect(&bytes.Buffer{}, env); c.TTY || c.Color {
		t.Errorf("a buffer is no terminal: %+v", c)
	}
	if Clip("héllo", 3) != "hé…" || OneLine(" a \n b ", 10) != "a b" {
		t.Error("clip")
	}
}

// BenchmarkSplitDiffStat: the end summary's diff stat of a 200-file,
// 20,000-line diff.
func BenchmarkSplitDiffStat(b *testing.B) {
	var d strings.Builder
	for i := range 200 {
		fmt.Fprintf(&d, "diff --git a/f%d.go b/f%d.go\n--- a/f%d.go\n+++ b/f%d.go\n@@ -1,50 +1,50 @@\n", i, i, i, i)
		for range 50 {
			d.WriteString("-old line\n+new line\n")
		}
	}
	diff := d.String()
	b.SetBytes(int64(len(diff)))
	for b.Loop() {
		_ = Stat(Caps{Color: true}, SplitDiff(diff), 120)
	}
}

// TestHostileDiffAndBar: a diff whose file name and lines carry escapes,
// bidirectional overrides and C1 controls comes out of Stat and ColorDiff
// (in colour or not), and a status text out of the Bar, with nothing but
// fluffy's own sequences.
func TestHostileDiffAndBar(t *testing.T) {
	own := regexp.MustCompile(`\x1b\[[0-9;]*[mrHKA]|\x1b[78]`)
	for _, s := range []string{
		"\x1b[2J\x1b[Hname",
		"user\u202e \u2066admin\u2069",
		"\u009b2J\x9b2J",
		"a\rb\bc\x7f",
		"\x1b]52;c;aGk=\x07",
	} {
		diff := "diff --git a/" + s + " b/" + s + "\n--- /dev/null\n+++ b/" + s + "\n@@ -0,0 +1 @@\n+" + s + "\n"
		var out strings.Builder
		for _, c := range []Caps{{}, {TTY: true, Color: true}} {
			out.WriteString(Stat(c, SplitDiff(diff), 80))
			out.WriteString(ColorDiff(c, diff))
		}
		var bar bytes.Buffer
		b := NewBar(&bar, func() (int, int, error) { return 200, 10, nil })
		b.Set("status " + s)
		b.Start()
		out.WriteString(bar.String())
		got := own.ReplaceAllString(out.String(), "")
		for _, r := range got {
			if r != '\n' && termsafe.Hidden(r) || r == utf8.RuneError {
				t.Fatalf("%q: %U reached the output:\n%q", s, r, got)
			}
		}
	}
}
