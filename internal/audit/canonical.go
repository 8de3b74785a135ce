package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotCanonical is wrapped by errors about JSON that cannot be
// canonicalized (invalid JSON, duplicate keys, non-finite numbers) or,
// for ParseEntry, bytes that are not already in canonical form.
var ErrNotCanonical = errors.New("not canonical JSON")

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text in: no insignificant whitespace, object members sorted by
// the UTF-16 code units of their names, numbers in the ECMAScript
// Number-to-String form of their IEEE 754 double value, strings with only
// the escapes JCS prescribes. Duplicate member names, invalid UTF-8 and
// trailing data are errors.
func Canonicalize(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotCanonical)
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(in))
	if err := canonValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrNotCanonical)
	}
	return out.Bytes(), nil
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

func canonValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrNotCanonical, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, out, depth)
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := canonValue(dec, out, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("%w: %v", ErrNotCanonical, err)
			}
			out.WriteByte(']')
			return nil
		}
		return fmt.Errorf("%w: unexpected %v", ErrNotCanonical, t)
	case string:
		writeString(out, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%w: number %s is not a finite IEEE 754 double", ErrNotCanonical, t)
		}
		out.WriteString(formatNumber(f))
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("%w: unexpected token %v", ErrNotCanonical, tok)
	}
	return nil
}

type member struct {
	key   string
	units []uint16
	value []byte
}

func canonObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotCanonical, err)
		}
		k, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%w: object key is not a string", ErrNotCanonical)
		}
		if seen[k] {
			return fmt.Errorf("%w: duplicate member %q", ErrNotCanonical, k)
		}
		seen[k] = true
		var v bytes.Buffer
		if err := canonValue(dec, &v, depth+1); err != nil {
			return err
		}
		ms = append(ms, member{key: k, units: utf16.Encode([]rune(k)), value: v.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	sort.Slice(ms, func(i, j int) bool { return lessUnits(ms[i].units, ms[j].units) })
	out.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(out, m.key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
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

// writeString writes s as JCS does (ECMAScript JSON.stringify): only '"',
// '\\' and control characters are escaped, with the short forms where they
// exist and \u00xx (lower-case hex) otherwise; everything else is literal.
func writeString(out *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			out.WriteString(`\"`)
		case c == '\\':
			out.WriteString(`\\`)
		case c == '\b':
			out.WriteString(`\b`)
		case c == '\f':
			out.WriteString(`\f`)
		case c == '\n':
			out.WriteString(`\n`)
		case c == '\r':
			out.WriteString(`\r`)
		case c == '\t':
			out.WriteString(`\t`)
		case c < 0x20:
			out.WriteString(`\u00`)
			out.WriteByte(hex[c>>4])
			out.WriteByte(hex[c&0xf])
		default:
			out.WriteByte(c)
		}
	}
	out.WriteByte('"')
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
