package spell

import (
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"runtime", "runtme", 1}, {"runtime", "runtime", 0}, {"ab", "ba", 2},
		{strings.Repeat("x", MaxLen+1), "x", Far},
	} {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := Distance(tt.b, tt.a); got != tt.want {
			t.Errorf("Distance is not symmetric for %q, %q", tt.a, tt.b)
		}
	}
}
