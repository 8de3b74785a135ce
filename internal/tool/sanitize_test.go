package tool

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func TestSanitizeEscapes(t *testing.T) {
	s := NewSanitizer(SanitizerOptions{})
	cases := []struct{ name, in, want string }{
		{"plain", "hello\n\tworld\n", "hello\n\tworld\n"},
		{"unicode", "héllo wörld ✓ 日本\n", "héllo wörld ✓ 日本\n"},
		{"sgr colours", "\x1b[1;31mred\x1b[0m plain", `\x1b[1;31mred\x1b[0m plain`},
		{"osc title bel", "\x1b]0;pwned title\x07after", `\x1b]0;pwned title\aafter`},
		{"osc hyperlink st", "\x1b]8;;https://evil.example\x1b\\click", `\x1b]8;;https://evil.example\x1b\click`},
		{"c1 csi as utf-8", "\u009b31mred", `\u009b31mred`},
		{"c1 other", "a\u0085b\u008dc", `a\u0085b\u008dc`},
		{"raw 8-bit c1", "\x9b31m", `\x9b31m`},
		{"invalid utf-8", "a\xff\xfeb\xc3", `a\xff\xfeb\xc3`},
		{"truncated rune then ascii", "\xe2\x80A", `\xe2\x80A`},
		{"overlong", "\xe0\x80\x80", `\xe0\x80\x80`},
		{"surrogate", "\xed\xa0\x80", `\xed\xa0\x80`},
		{"backspace overwrite", "safe\b\b\b\bevil", `safe\b\b\b\bevil`},
		{"c0 and del", "a\x07b\x01c\x7fd", `a\ab\x01c\x7fd`},
		{"carriage return", "10%\r100%\r\ndone\r", `10%\r100%` + "\n" + `done\r`},
		{"bidi override in a name", "bidi\u202etxt.md", `bidi\u202etxt.md`},
		{"isolates and marks", "a\u2066b\u2069c\u200fd", `a\u2066b\u2069c\u200fd`},
		{"zero width", "a\u200bb\u200dc\ufeffd", `a\u200bb\u200dc\ufeffd`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"tag characters", "a\U000e0041b", `a\U000e0041b`},
		{"hangul filler", "a\u3164b", `a\u3164b`},
		{"replacement char stays", "a\ufffdb", "a\ufffdb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := s.Sanitize([]byte(c.in))
			if got.Text != c.want {
				t.Errorf("Sanitize(%q) = %q, want %q", c.in, got.Text, c.want)
			}
			if got.Binary || got.CutBytes != 0 {
				t.Errorf("result %+v", got)
			}
			// One definition of what must not pass raw: the
			// terminal's.
			if got.Text != termsafe.String(got.Text) {
				t.Errorf("termsafe would still escape %q", got.Text)
			}
		})
	}
}

// TestSanitizeTellsNamesApart: names that differ only by characters a
// reader cannot see stay different.
func TestSanitizeTellsNamesApart(t *testing.T) {
	s := NewSanitizer(SanitizerOptions{})
	names := []string{"biditxt.md", "bidi\u202etxt.md", "bidi\u200btxt.md", "bidi\u2066txt.md", "bidi\x1btxt.md", "bidi\xfftxt.md", "bidi\u00a0txt.md"}
	seen := map[string]string{}
	for _, n := range names {
		got := s.Sanitize([]byte(n)).Text
		if prev, ok := seen[got]; ok {
			t.Errorf("%q and %q both show as %q", prev, n, got)
		}
		seen[got] = n
	}
}

func TestSanitizeRedacts(t *testing.T) {
	secrets := []string{"sk-live-ABCDEF", "sk-live-ABC", "hunter2", "\x1b[1mpw\x1b[0m"}
	s := NewSanitizer(SanitizerOptions{Secrets: func() []string { return secrets }})
	cases := []struct{ in, want string }{
		{"key=sk-live-ABCDEF;", "key=[REDACTED];"},
		{"key=sk-live-ABC;", "key=[REDACTED];"},
		{"key=sk-live-ABCD", "key=[REDACTED]D"},
		{"hunter2hunter2", "[REDACTED][REDACTED]"},
		{"\x1b[1mpw\x1b[0m", "[REDACTED]"}, // the secret as it was given
		{"hunter", "hunter"},
	}
	for _, c := range cases {
		if got := s.Sanitize([]byte(c.in)); got.Text != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got.Text, c.want)
		}
	}
	// Controls put inside a secret would carry it past the redaction
	// in escaped form: the output is withheld.
	for _, in := range []string{"hunt\x1b[0mer2", "x hunt\u200ber2 y", "pw"} {
		if got := s.Sanitize([]byte(in)); !got.Withheld || strings.Contains(got.Text, "hun") || !strings.HasPrefix(got.Text, "[output withheld: ") {
			t.Errorf("Sanitize(%q) = %+v, want it withheld", in, got)
		}
	}
	// Across every possible chunk boundary.
	in := "a sk-live-ABCDEF b hunter2 c"
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			st := s.Stream()
			st.Write([]byte(in[:i]))
			st.Write([]byte(in[i:j]))
			st.Write([]byte(in[j:]))
			r := st.Close()
			if r.Text != "a [REDACTED] b [REDACTED] c" || r.Redactions != 2 {
				t.Fatalf("split %d,%d: %q (%d)", i, j, r.Text, r.Redactions)
			}
		}
	}
}

func TestSanitizeCaps(t *testing.T) {
	cases := []struct {
		name      string
		max, tail int
		in, want  string
		cut       int64
	}{
		{"fits", 10, 0, "0123456789", "0123456789", 0},
		{"head and tail", 10, 0, "0123456789abcdef", "01234567\n[output truncated: 6 bytes cut; showing the first 8 and the last 2 bytes]\nef", 6},
		{"head only", 10, -1, "0123456789abcdef", "0123456789\n[output truncated: 6 bytes cut; showing the first 10 and the last 0 bytes]\n", 6},
		{"tail only", 10, 10, "0123456789abcdef", "\n[output truncated: 6 bytes cut; showing the first 0 and the last 10 bytes]\n6789abcdef", 6},
		{"rune split at the head", 10, -1, "012345678é", "012345678\n[output truncated: 2 bytes cut; showing the first 9 and the last 0 bytes]\n", 2},
		{"rune split at the tail", 4, 2, "ab_éz_cd_éz", "ab\n[output truncated: 10 bytes cut; showing the first 2 and the last 1 bytes]\nz", 10},
		{"escapes count as shown", 12, -1, "\x1b[31m01", `\x1b[31m01`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewSanitizer(SanitizerOptions{MaxBytes: c.max, TailBytes: c.tail}).Sanitize([]byte(c.in))
			if r.Text != c.want || r.CutBytes != c.cut {
				t.Errorf("got %q (cut %d), want %q (cut %d)", r.Text, r.CutBytes, c.want, c.cut)
			}
		})
	}
	// Huge output in small writes keeps the head and the very end.
	st := NewSanitizer(SanitizerOptions{MaxBytes: 1000}).Stream()
	for i := range 10000 {
		fmt.Fprintf(st, "line %05d\n", i)
	}
	r := st.Close()
	if r.InputBytes != 110000 || r.CutBytes != 110000-1000 {
		t.Errorf("input %d, cut %d", r.InputBytes, r.CutBytes)
	}
	if !strings.HasPrefix(r.Text, "line 00000\n") || !strings.HasSuffix(r.Text, "line 09999\n") || !strings.Contains(r.Text, "[output truncated: 109000 bytes cut; showing the first 750 and the last 250 bytes]") {
		t.Errorf("got %q", r.Text)
	}
}

func TestSanitizeBinary(t *testing.T) {
	elf := append([]byte("\x7fELF\x02\x01\x01\x00"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 5000)...)
	r := NewSanitizer(SanitizerOptions{Secrets: func() []string { return []string{"ELF"} }}).Sanitize(elf)
	if !r.Binary || !strings.HasPrefix(r.Text, "[binary output not shown: 20008 bytes, application/octet-stream, sha256 ") {
		t.Errorf("got %+v", r)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	if r := NewSanitizer(SanitizerOptions{}).Sanitize(png); !r.Binary || !strings.Contains(r.Text, "image/png") {
		t.Errorf("png: %q", r.Text)
	}
	// Latin-1 text with a few odd bytes is still text.
	if r := NewSanitizer(SanitizerOptions{}).Sanitize([]byte("caf\xe9 cr\xe8me, plain text otherwise")); r.Binary {
		t.Errorf("latin-1 text judged binary")
	}
}

func FuzzSanitize(f *testing.F) {
	f.Add([]byte("\x1b[31mred\x1b]0;t\x07 sk-1234 \u009b1m"), "sk-1234", 3, 9)
	f.Add([]byte("abc\rdef\r\n\x1bP..\x1b\\"), "def", 1, 2)
	f.Add([]byte("é\xc3"), "\xc3", 0, 1)
	f.Fuzz(func(t *testing.T, in []byte, secret string, i, j int) {
		s := NewSanitizer(SanitizerOptions{MaxBytes: 200, Secrets: func() []string { return []string{secret} }})
		one := s.Sanitize(in)
		// Streaming in any split gives the same result.
		i = clamp(i, len(in))
		j = clamp(j, len(in))
		if i > j {
			i, j = j, i
		}
		st := s.Stream()
		st.Write(in[:i])
		st.Write(in[i:j])
		st.Write(in[j:])
		if two := st.Close(); two != one {
			t.Fatalf("split %d,%d: %+v != one-shot %+v", i, j, two, one)
		}
		if one.Binary {
			return
		}
		text := one.Text
		if one.CutBytes > 0 {
			m := markerRE.FindStringSubmatchIndex(text)
			if m == nil {
				t.Fatalf("cut without a marker: %q", text)
			}
			head, tail := text[:m[0]], text[m[1]:]
			if len(head)+len(tail) > 200 || int64(len(head)+len(tail))+one.CutBytes < 200 {
				t.Fatalf("head %d + tail %d + cut %d bytes for a cap of 200", len(head), len(tail), one.CutBytes)
			}
			text = head + "\n" + tail
		}
		if len(text) > 201 {
			t.Fatalf("%d bytes kept over a cap of 200", len(text))
		}
		if !utf8.ValidString(text) {
			t.Fatalf("invalid UTF-8: %q", text)
		}
		for _, r := range text {
			if r != '\n' && r != '\t' && termsafe.Hidden(r) {
				t.Fatalf("control or invisible %U left raw in %q", r, text)
			}
		}
		if one.Withheld {
			return
		}
		var cs []byte
		var c escaper
		c.feed([]byte(secret), func(b []byte) { cs = append(cs, b...) })
		c.flush(func(b []byte) { cs = append(cs, b...) })
		if len(cs) > 0 && one.CutBytes == 0 {
			for _, piece := range strings.Split(text, DefaultRedaction) {
				if strings.Contains(piece, string(cs)) {
					t.Fatalf("secret %q leaked in %q", cs, text)
				}
			}
		}
	})
}

var markerRE = regexp.MustCompile(`\n\[output truncated: \d+ bytes cut; showing the first \d+ and the last \d+ bytes\]\n`)

func clamp(i, n int) int {
	if i < 0 {
		i = -i
	}
	if n == 0 {
		return 0
	}
	return i % (n + 1)
}

func BenchmarkSanitize(b *testing.B) {
	line := []byte("\x1b[32mok\x1b[0m  github.com/fluffy-agent/fluffy/internal/tool  0.017s token=sk-live-0123456789\n")
	in := bytes.Repeat(line, 10000) // ~1 MB
	s := NewSanitizer(SanitizerOptions{MaxBytes: 1 << 20, Secrets: func() []string { return []string{"sk-live-0123456789", "hunter2", "ghp_abcdefghijklmnop"} }})
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		s.Sanitize(in)
	}
}

// TestSanitizePoolReuse: Sanitize recycles streams; a recycled stream
// gives what a fresh one gives, whatever the previous output left in it
// (a cut, a binary sniff, a secret half-matched, an escape sequence cut
// short), across sanitizers with different secrets and caps.
func TestSanitizePoolReuse(t *testing.T) {
	sans := []*Sanitizer{
		NewSanitizer(SanitizerOptions{}),
		NewSanitizer(SanitizerOptions{MaxBytes: 40, Secrets: func() []string { return []string{"hunter2", "tok-XYZ"} }}),
	}
	inputs := [][]byte{
		[]byte("plain\n"), []byte("ends in an escape \x1b[3"), []byte("secret hunter2 and tok-XY"),
		append([]byte("\x00\x01binary"), make([]byte, 600)...), []byte(strings.Repeat("long line é ", 30)),
		[]byte(""), []byte("tok-XYZ\x1b]0;title\x07 done"), []byte("hunter"),
	}
	for round := range 3 {
		for i, in := range inputs {
			s := sans[(i+round)%len(sans)]
			fresh := s.Stream()
			_, _ = fresh.Write(in)
			want := fresh.Close()
			if got := s.Sanitize(in); got != want {
				t.Fatalf("round %d input %d: Sanitize %+v, fresh stream %+v", round, i, got, want)
			}
		}
	}
}

// TestSecretBytesWiped: values from SecretBytes are redacted like Secrets,
// and the slices handed over are zeroed once the stream is closed, as are
// the stream's own copies.
func TestSecretBytesWiped(t *testing.T) {
	var handed [][]byte
	s := NewSanitizer(SanitizerOptions{SecretBytes: func() [][]byte {
		handed = [][]byte{[]byte("hunter2-hunter2"), []byte("hunter2-hunter2")}
		return handed
	}})
	st := s.Stream()
	_, _ = st.Write([]byte("pw=hunter2-hun"))
	_, _ = st.Write([]byte("ter2 and hunter2-h"))
	r := st.Close()
	if r.Text != "pw=[REDACTED] and hunter2-h" || r.Redactions != 1 {
		t.Errorf("text %q, %d redactions", r.Text, r.Redactions)
	}
	for _, h := range handed {
		if string(h) == "hunter2-hunter2" {
			t.Error("a handed-over value was not zeroed")
		}
	}
	for _, red := range []*redactor{&st.red, &st.chkRed} {
		for _, v := range red.secrets {
			if bytes.Contains(v, []byte("hunter")) {
				t.Errorf("the stream kept a copy: %q", v)
			}
		}
		if bytes.Contains(red.pend[:cap(red.pend)], []byte("hunter2-h")) {
			t.Error("the held-back tail was not zeroed")
		}
	}
	if r := s.Sanitize([]byte("x hunter2-hunter2")); r.Text != "x [REDACTED]" {
		t.Errorf("Sanitize: %q", r.Text)
	}
}
