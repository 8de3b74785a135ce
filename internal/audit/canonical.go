package audit

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/jsonnum"
)

// ErrNotCanonical is wrapped by errors about JSON that cannot be
// canonicalized (invalid JSON, duplicate keys, non-finite numbers) or,
// for ParseEntry, bytes that are not already in canonical form.
var ErrNotCanonical = errors.New("not canonical JSON")

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text in: no insignificant whitespace, object members sorted by
// the UTF-16 code units of their names, numbers in the ECMAScript
// Number-to-String form of their IEEE 754 double value, strings with only
// the escapes JCS prescribes. Duplicate member names, invalid UTF-8, lone
// surrogate escapes, nesting deeper than 64 and trailing data are errors.
func Canonicalize(in []byte) ([]byte, error) {
	p := parser{in: in, out: make([]byte, 0, len(in))}
	p.ws()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(in) {
		return nil, p.errf("data after the JSON value")
	}
	return p.out, nil
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

// parser is a strict RFC 8259 parser that writes the canonical form as it
// goes.
type parser struct {
	in  []byte
	i   int
	out []byte
}

func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrNotCanonical, p.i, fmt.Sprintf(format, args...))
}

func (p *parser) ws() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) error {
	if depth > maxDepth {
		return p.errf("nested deeper than %d", maxDepth)
	}
	if p.i >= len(p.in) {
		return p.errf("unexpected end of input")
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		p.i++
		p.out = append(p.out, '[')
		p.ws()
		if p.i < len(p.in) && p.in[p.i] == ']' {
			p.i++
			p.out = append(p.out, ']')
			return nil
		}
		for {
			p.ws()
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.in) {
				return p.errf("unterminated array")
			}
			if p.in[p.i] == ']' {
				p.i++
				p.out = append(p.out, ']')
				return nil
			}
			if p.in[p.i] != ',' {
				return p.errf("expected , or ] in array")
			}
			p.i++
			p.out = append(p.out, ',')
		}
	case c == '"':
		str, err := p.str()
		if err != nil {
			return err
		}
		p.out = appendString(p.out, str)
		return nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(p.in[p.i:], []byte(lit)) {
			p.i += len(lit)
			p.out = append(p.out, lit...)
			return nil
		}
	}
	return p.errf("unexpected character %q", p.in[p.i])
}

type member struct {
	key   string
	units []uint16
	value []byte
}

func (p *parser) object(depth int) error {
	p.i++ // {
	var ms []member
	p.ws()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		p.out = append(p.out, '{', '}')
		return nil
	}
	outer := p.out
	for {
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return p.errf("expected a member name")
		}
		k, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return p.errf("expected : after member name")
		}
		p.i++
		p.ws()
		p.out = nil
		if err := p.value(depth + 1); err != nil {
			return err
		}
		ms = append(ms, member{key: k, value: p.out})
		p.ws()
		if p.i >= len(p.in) {
			return p.errf("unterminated object")
		}
		if p.in[p.i] == '}' {
			p.i++
			break
		}
		if p.in[p.i] != ',' {
			return p.errf("expected , or } in object")
		}
		p.i++
	}
	// Names sort by UTF-16 code units; for names without supplementary
	// characters that is the order of their UTF-8 bytes.
	wide := false
	for _, m := range ms {
		for j := 0; j < len(m.key); j++ {
			if m.key[j] >= 0xf0 {
				wide = true
			}
		}
	}
	if wide {
		for i := range ms {
			ms[i].units = utf16.Encode([]rune(ms[i].key))
		}
		slices.SortFunc(ms, func(a, b member) int {
			switch {
			case lessUnits(a.units, b.units):
				return -1
			case lessUnits(b.units, a.units):
				return 1
			}
			return 0
		})
	} else {
		// slices.SortFunc, unlike sort.Slice, does not allocate.
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	}
	out := append(outer, '{')
	for i, m := range ms {
		if i > 0 {
			if m.key == ms[i-1].key {
				return p.errf("duplicate member %q", m.key)
			}
			out = append(out, ',')
		}
		out = appendString(out, m.key)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	p.out = append(out, '}')
	return nil
}

// str reads a string literal and returns its value.
func (p *parser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.in) {
		c := p.in[p.i]
		if c == '"' {
			s := p.in[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", p.errf("invalid UTF-8 in string")
			}
			return string(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	buf := append([]byte(nil), p.in[start:p.i]...)
	for p.i < len(p.in) {
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(buf) {
				return "", p.errf("invalid UTF-8 in string")
			}
			return string(buf), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.in) {
			break
		}
		e := p.in[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || p.i+1 >= len(p.in) || p.in[p.i] != '\\' || p.in[p.i+1] != 'u' {
					return "", p.errf("lone surrogate \\u%04x", r)
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return "", p.errf("lone surrogate \\u%04x", r)
				}
				r = utf16.DecodeRune(r, r2)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errf("bad escape \\%c", e)
		}
	}
	return "", p.errf("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.in) {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// number reads an RFC 8259 number and writes its ECMAScript form.
func (p *parser) number() error {
	start := p.i
	end, n, plain, ok := jsonnum.Span(p.in, p.i)
	p.i = end
	if !ok {
		return p.errf("malformed number")
	}
	lit := p.in[start:p.i]
	// Integers of up to 15 digits are exact doubles and ECMAScript prints
	// them as they are (but "-0" is "0").
	if plain && n <= 15 {
		if string(lit) == "-0" {
			lit = []byte("0")
		}
		p.out = append(p.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return p.errf("number %s is not a finite IEEE 754 double", lit)
	}
	p.out = append(p.out, formatNumber(f)...)
	return nil
}

func lessUnits(a, b []uint16) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// appendString appends s as JCS does (ECMAScript JSON.stringify): only
// '"', '\\' and control characters are escaped, with the short forms where
// they exist and \u00xx (lower-case hex) otherwise; everything else is
// literal.
func appendString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[start:i]...)
		start = i + 1
		switch c {
		case '"':
			out = append(out, '\\', '"')
		case '\\':
			out = append(out, '\\', '\\')
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// formatNumber is ECMAScript's Number::toString for finite doubles:
// shortest round-trip digits, plain notation for 1e-6 <= |f| < 1e21,
// exponent notation (e+21, e-7) otherwise, and -0 written as 0.
func formatNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	abs := math.Abs(f)
	if abs >= 1e-6 && abs < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	// Go writes at least two exponent digits (1e-07); ECMAScript does not.
	if n := len(s); n >= 4 && s[n-2] == '0' && (s[n-3] == '-' || s[n-3] == '+') {
		s = s[:n-2] + s[n-1:]
	}
	return s
}
