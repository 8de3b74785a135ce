// Package spell owns "did you mean" suggestions: the edit distance between
// a mistyped name (a config key, a policy field, a tool name) and the names
// that exist. It is a leaf every package with user-facing names can use.
package spell

// MaxLen bounds the names Distance compares; longer ones are "far" at once,
// so hostile input cannot make a suggestion cost quadratic time.
const MaxLen = 128

// Far is the distance reported for names longer than MaxLen.
const Far = 1 << 20

// Distance returns the Levenshtein distance between a and b (bytes), or Far
// when either is longer than MaxLen.
func Distance(a, b string) int {
	if len(a) > MaxLen || len(b) > MaxLen {
		return Far
	}
	return Levenshtein(a, b)
}

// Levenshtein returns the byte edit distance of a and b without a length
// bound: callers that take outside input bound it themselves (its cost is
// len(a)*len(b)).
func Levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
