package audit

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Object builds an entry payload directly in canonical form (RFC 8785),
// so Append takes it as it is: no encoding/json marshal and no re-parse
// by Canonicalize. It is for hot paths (the tool router's fast path);
// anything else may keep passing maps and structs.
//
// Members must be added in canonical order: names strictly increasing
// byte by byte. Names are restricted to printable ASCII without '"' and
// '\\', for which byte order is the UTF-16 order JCS sorts by. Strings
// are written as JCS writes them (invalid UTF-8 becomes U+FFFD, as
// encoding/json would make it); integers as ECMAScript prints the double
// nearest to them. A misuse (a name out of order or not allowed) is kept
// and reported by Err, and Append refuses the payload, so a builder bug
// can never write a non-canonical entry.
//
// The zero Object is empty and ready to use. Not safe for concurrent use.
type Object struct {
	b    []byte
	last string
	n    int
	err  error
}

// Err reports the first misuse, if any.
func (o *Object) Err() error { return o.err }

// Reset empties o, keeping its buffer.
func (o *Object) Reset() { *o = Object{b: o.b[:0]} }

// Bytes returns the canonical JSON text of the object ({} when empty).
// The result aliases o's buffer until the next change.
func (o *Object) Bytes() []byte {
	if o.n == 0 {
		return append(o.b[:0], '{', '}')
	}
	o.b = append(o.b, '}')
	out := o.b
	o.b = o.b[:len(o.b)-1]
	return out
}

func (o *Object) name(name string) bool {
	if o.err != nil {
		return false
	}
	if name == "" || (o.n > 0 && name <= o.last) {
		o.err = fmt.Errorf("%w: audit.Object member %q added after %q: members must be added in increasing order", ErrNotCanonical, name, o.last)
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			o.err = fmt.Errorf("%w: audit.Object member name %q: only printable ASCII without quote or backslash", ErrNotCanonical, name)
			return false
		}
	}
	if o.n == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.b = append(o.b, '"')
	o.b = append(o.b, name...)
	o.b = append(o.b, '"', ':')
	o.last, o.n = name, o.n+1
	return true
}

// String adds a string member.
func (o *Object) String(name, v string) {
	if o.name(name) {
		o.b = appendValidString(o.b, v)
	}
}

// Strings adds an array of strings.
func (o *Object) Strings(name string, v []string) {
	if !o.name(name) {
		return
	}
	o.b = append(o.b, '[')
	for i, s := range v {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = appendValidString(o.b, s)
	}
	o.b = append(o.b, ']')
}

// Hex adds the lower-case hex form of v as a string.
func (o *Object) Hex(name string, v []byte) {
	if !o.name(name) {
		return
	}
	o.b = append(o.b, '"')
	o.b = hex.AppendEncode(o.b, v)
	o.b = append(o.b, '"')
}

// Int adds an integer member.
func (o *Object) Int(name string, v int64) {
	if o.name(name) {
		o.b = appendInt(o.b, v)
	}
}

// Bool adds a boolean member.
func (o *Object) Bool(name string, v bool) {
	if o.name(name) {
		o.b = strconv.AppendBool(o.b, v)
	}
}

// Object adds a nested object built with its own Object (whose misuse is
// reported here too).
func (o *Object) Object(name string, sub *Object) {
	if sub.err != nil && o.err == nil {
		o.err = sub.err
	}
	if o.name(name) {
		o.b = append(o.b, sub.Bytes()...)
	}
}

// gate adds {"effect":...,"rule":...} without a builder of its own (no
// allocation on the fast path).
func (o *Object) gate(name string, g GateSummary) {
	if !o.name(name) {
		return
	}
	o.b = append(o.b, `{"effect":`...)
	o.b = appendValidString(o.b, g.Effect)
	o.b = append(o.b, `,"rule":`...)
	o.b = appendValidString(o.b, g.Rule)
	o.b = append(o.b, '}')
}

// appendInt writes v as Canonicalize writes the JSON number v: integers
// of up to 15 digits as they are, larger ones through the nearest double.
func appendInt(b []byte, v int64) []byte {
	if v > -1e15 && v < 1e15 {
		return strconv.AppendInt(b, v, 10)
	}
	return append(b, formatNumber(float64(v))...)
}

// appendValidString is appendString for any Go string: invalid UTF-8
// becomes U+FFFD, as encoding/json would write it.
func appendValidString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = toValidUTF8(s)
	}
	return appendString(b, s)
}

// toValidUTF8 replaces each invalid byte with U+FFFD, as encoding/json
// does (strings.ToValidUTF8 would replace a run with one).
func toValidUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
