// Package jsonname owns the one rule for when two JSON member names are
// the same name to Go: encoding/json matches member names to struct fields
// without regard to case (Unicode simple case folding, the Kelvin sign
// included), so {"path":"a","PATH":"b"} sets one field twice. The strict
// readers of outside JSON (IPC frames, the model's tool arguments) refuse
// such objects as duplicates; they compare names through Fold.
package jsonname

import (
	"unicode"
	"unicode/utf8"
)

// Fold maps a member name to one form shared by every name equal to it
// under Unicode simple case folding: the least rune of each rune's folding
// orbit ("K" for k, K and the Kelvin sign).
func Fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		b := []byte(s)
		for i, c := range b {
			if 'a' <= c && c <= 'z' { // the orbit's least rune, as below
				b[i] = c - ('a' - 'A')
			}
		}
		return string(b)
	}
	r := []rune(s)
	for i, c := range r {
		m := c
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		r[i] = m
	}
	return string(r)
}
