package jsonnum

import (
	"encoding/json"
	"testing"
)

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		in        string
		end, ints int
		integer   bool
		ok        bool
	}{
		{"0", 1, 1, true, true},
		{"-0", 2, 1, true, true},
		{"123,", 3, 3, true, true},
		{"-12.5e+3]", 8, 2, false, true},
		{"1E9", 3, 1, false, true},
		{"0.5", 3, 1, false, true},
		{"01", 2, 2, false, false},
		{"-", 1, 0, false, false},
		{"1.", 2, 1, false, false},
		{"1e", 2, 1, false, false},
		{"1e+", 3, 1, false, false},
		{".5", 0, 0, false, false},
	} {
		end, ints, integer, ok := Span([]byte(c.in), 0)
		if ok != c.ok || ok && (end != c.end || ints != c.ints || integer != c.integer) {
			t.Errorf("Span(%q) = %d, %d, %v, %v; want %d, %d, %v, %v", c.in, end, ints, integer, ok, c.end, c.ints, c.integer, c.ok)
		}
	}
}

// FuzzSpan: a span Span accepts is a valid JSON number by encoding/json,
// and a whole input encoding/json takes for a number is accepted entire.
func FuzzSpan(f *testing.F) {
	for _, s := range []string{"0", "-1.5e3", "01", "1e", "12345678901234567890", "-0.0E-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := []byte(s)
		end, _, _, ok := Span(in, 0)
		if ok && !json.Valid(in[:end]) {
			t.Fatalf("Span accepted %q, encoding/json refuses it", in[:end])
		}
		// A whole input that is valid JSON and starts like a number is
		// one number: Span must take all of it.
		if json.Valid(in) && len(in) > 0 && (in[0] == '-' || in[0] >= '0' && in[0] <= '9') && in[len(in)-1] > ' ' {
			if !ok || end != len(in) {
				t.Fatalf("encoding/json reads %q as a number; Span = %d, %v", in, end, ok)
			}
		}
	})
}
