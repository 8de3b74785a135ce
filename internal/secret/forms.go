package secret

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
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
	if len(v) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	add(string(v))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		add(enc.EncodeToString(v))
	}
	if len(v) >= 9 {
		for k := 0; k < 3; k++ {
			core := v[k:]
			core = core[:len(core)/3*3]
			add(base64.RawStdEncoding.EncodeToString(core))
			add(base64.RawURLEncoding.EncodeToString(core))
		}
	}
	add(url.QueryEscape(string(v)))
	add(url.PathEscape(string(v)))
	h := hex.EncodeToString(v)
	add(h)
	add(strings.ToUpper(h))
	// Longest first, so a form that contains another is replaced whole.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
