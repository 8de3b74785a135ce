// Package jsonnum owns the one scanner of JSON number literals (RFC 8259
// §6) that fluffy's hand-written JSON readers share: the audit log's
// canonicalizer and the tool router's argument parser. Each turns the
// span into its own form; the grammar lives here once.
package jsonnum

// Span scans the number starting at in[i]. It returns the index just past
// it, how many digits its integer part has, and whether it is a plain
// integer (no fraction, no exponent). ok is false when in[i:] does not
// start with a well-formed number (a leading zero followed by digits, a
// dot or an exponent without digits, a lone minus).
func Span(in []byte, i int) (end, intDigits int, integer, ok bool) {
	if i < len(in) && in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	intStart := i
	intDigits = digits()
	if intDigits == 0 || intDigits > 1 && in[intStart] == '0' {
		return i, intDigits, false, false
	}
	integer = true
	if i < len(in) && in[i] == '.' {
		i++
		integer = false
		if digits() == 0 {
			return i, intDigits, false, false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		integer = false
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, intDigits, false, false
		}
	}
	return i, intDigits, integer, true
}
