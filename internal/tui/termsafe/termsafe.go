// Package termsafe owns the one rule for showing text from outside fluffy
// on a terminal: the model's words, tool results, file names, diffs,
// approval plans, audit payloads, error messages that quote any of these.
// Only fluffy's own rendering may emit terminal control sequences; every
// other byte goes through String, Line or a Writer, which show control
// characters, escape sequences, C1 controls, bidirectional overrides,
// invisible characters and invalid UTF-8 visibly escaped (\x1b, \u202e,
// \xff), the way Go quotes a string, instead of letting the terminal act
// on them. JSON output (--json) goes through JSON or a JSONWriter, which
// write the same characters as \u escapes inside its strings.
//
// internal/tool's result sanitizer, which cleans what goes back into the
// model's context, escapes by the same rule (Hidden) and also redacts
// secrets and caps sizes; this package is for a person's screen, where
// nothing may be hidden or dropped silently.
//
// The escaped form is idempotent: escaping escaped text changes nothing,
// so text may pass through more than one surface safely. A backslash is
// not itself escaped: text that spells "\x1b" shows the same as an
// escaped ESC, and neither acts on the terminal.
package termsafe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// String returns s safe for a terminal, keeping newlines and tabs so
// multi-line text (a diff, a tool's output, the model's prose) stays
// readable. Every other control byte is escaped, including a carriage
// return (which would return to column 0 and overwrite the line) and a
// backspace.
func String(s string) string { return escape(s, false) }

// Line returns s safe for a terminal on one line: as String, and newlines
// and tabs escaped too. For names and fields a line layout depends on (a
// file name in a change listing, a gate line's arguments, a plan summary),
// where a newline would start a line the text's author controls.
func Line(s string) string { return escape(s, true) }

// Safe reports whether String leaves s unchanged.
func Safe(s string) bool { return clean(s, false) }

// Writer escapes everything written through it with String before it
// reaches the underlying writer: for output that holds no sequences of
// fluffy's own. A rune split across two writes is shown as escaped bytes.
type Writer struct {
	w io.Writer
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports len(p) on success, as the
// escaped form is usually longer than p.
func (w *Writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// JSON returns the JSON text b with every rune Hidden would escape, and
// any invalid UTF-8, written as a \u escape instead. Go's encoder already
// escapes C0 controls and U+2028/U+2029 but leaves DEL, C1 controls,
// bidirectional overrides and zero-width characters raw; outside strings
// JSON text is ASCII, so only strings change, and they decode to the
// same values (invalid UTF-8 as U+FFFD, as encoding/json decodes it).
func JSON(b []byte) []byte {
	if clean(string(b), false) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r >= 0x7f && Hidden(r):
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// JSONWriter applies JSON to each write: for a json.Encoder, whose every
// Encode is one write of whole values.
type JSONWriter struct {
	w io.Writer
}

// NewJSONWriter returns a JSONWriter writing to w.
func NewJSONWriter(w io.Writer) *JSONWriter { return &JSONWriter{w: w} }

// Write escapes p with JSON and writes it; it reports len(p) on success.
func (w *JSONWriter) Write(p []byte) (int, error) {
	if _, err := w.w.Write(JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// clean is the fast path: plain printable ASCII (and \n, \t unless
// oneLine) needs no work.
func clean(s string, oneLine bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			continue
		}
		if (c == '\n' || c == '\t') && !oneLine {
			continue
		}
		if c < utf8.RuneSelf {
			return false
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Hidden(r) {
			return false
		}
		i += n - 1
	}
	return true
}

func escape(s string, oneLine bool) string {
	if clean(s, oneLine) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c < 0x7f, (c == '\n' || c == '\t') && !oneLine:
				b.WriteByte(c)
			default:
				writeByte(&b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			writeByte(&b, c) // invalid UTF-8: the byte, so 0x9b (8-bit CSI) shows as \x9b
		case Hidden(r):
			writeRune(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Hidden reports whether a terminal would act on r or show nothing for it,
// so it must be escaped: C0 and C1 controls and DEL, format characters
// (bidirectional embeddings, overrides and isolates, the Arabic letter
// mark, zero-width spaces and joiners, the byte order mark, soft hyphen,
// tag characters), line and paragraph separators, and characters that
// render as blank letters (Hangul fillers, the combining grapheme joiner,
// supplementary variation selectors) and so hide in names and code.
func Hidden(r rune) bool {
	switch {
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return true
	case r < 0xa0:
		return false
	case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
		return true
	}
	switch r {
	case 0x034f, // combining grapheme joiner
		0x115f, 0x1160, 0x3164, 0xffa0, // Hangul fillers
		0x17b4, 0x17b5, // Khmer inherent vowels (invisible)
		0x180b, 0x180c, 0x180d, 0x180f: // Mongolian variation selectors
		return true
	}
	return r >= 0xe0100 && r <= 0xe01ef // supplementary variation selectors
}

func writeByte(b *strings.Builder, c byte) {
	switch c {
	case '\a':
		b.WriteString(`\a`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\v':
		b.WriteString(`\v`)
	default:
		const hex = "0123456789abcdef"
		b.WriteString(`\x`)
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
}

func writeRune(b *strings.Builder, r rune) {
	if r < 0x80 {
		writeByte(b, byte(r))
		return
	}
	q := strconv.QuoteRuneToASCII(r) // '\u202e' or '\U000e0041'
	b.WriteString(q[1 : len(q)-1])
}
