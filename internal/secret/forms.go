package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
)

// Forms returns the strings redaction looks for when v was handed out:
// the value itself, its base64 (standard and URL alphabets, padded or
// not), its URL encodings (query and path) and its hex (lower and upper
// case). For a value of 9 bytes or more it adds the base64 of the value
// from its second and third byte on, cut to whole groups: base64 of text
// that merely contains the value aligns it at any of three offsets, and
// these cores are what every alignment shares (up to two bytes at either
// end stay visible). Duplicates are removed; the order is longest first.
func Forms(v []byte) []string {
	fs := formBytes(v)
	if fs == nil {
		return nil
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
		wipe(f)
	}
	return out
}

// formBytes is Forms in slices of their own, which the caller zeroes:
// no form is ever a Go string.
func formBytes(v []byte) [][]byte {
	if len(v) == 0 {
		return nil
	}
	var out [][]byte
	add := func(f []byte) {
		if len(f) == 0 {
			return
		}
		for _, o := range out {
			if bytes.Equal(o, f) {
				wipe(f)
				return
			}
		}
		out = append(out, f)
	}
	add(bytes.Clone(v))
	b64 := func(enc *base64.Encoding, src []byte) []byte {
		dst := make([]byte, enc.EncodedLen(len(src)))
		enc.Encode(dst, src)
		return dst
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		add(b64(enc, v))
	}
	if len(v) >= 9 {
		for k := 0; k < 3; k++ {
			core := v[k:]
			core = core[:len(core)/3*3]
			add(b64(base64.RawStdEncoding, core))
			add(b64(base64.RawURLEncoding, core))
		}
	}
	add(percent(v, true))
	add(percent(v, false))
	h := make([]byte, hex.EncodedLen(len(v)))
	hex.Encode(h, v)
	add(h)
	add(bytes.ToUpper(h))
	// Longest first, so a form that contains another is replaced whole.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// percent is url.QueryEscape (query) or url.PathEscape of v, into a
// slice of its own.
func percent(v []byte, query bool) []byte {
	const hexUpper = "0123456789ABCDEF"
	out := make([]byte, 0, len(v)*3)
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			out = append(out, c)
		case query && c == ' ':
			out = append(out, '+')
		case !query && (c == '$' || c == '&' || c == '+' || c == ':' || c == '=' || c == '@'):
			out = append(out, c)
		default:
			out = append(out, '%', hexUpper[c>>4], hexUpper[c&15])
		}
	}
	return out
}
