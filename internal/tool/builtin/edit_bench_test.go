package builtin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aymanbagabas/go-udiff"
)

// BenchmarkEditDiff applies a 20-hunk diff to a 10,000-line file (parse,
// locate, apply; no change set).
func BenchmarkEditDiff(b *testing.B) {
	var lines []string
	for i := range 10000 {
		lines = append(lines, fmt.Sprintf("line %d: some text that is long enough to look like code();", i))
	}
	a := strings.Join(lines, "\n") + "\n"
	for i := 0; i < 10000; i += 500 {
		lines[i] = lines[i] + " // changed"
	}
	d, err := udiff.ToUnified("a/f.go", "b/f.go", a, udiff.Lines(a, strings.Join(lines, "\n")+"\n"), 3)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(a)))
	for b.Loop() {
		fps, err := parsePatch(d, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := applyHunks("f.go", a, fps[0].Hunks); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNearestMiss is the worst case of a failing edit: a 200-line old
// text matching nothing in a 20,000-line file (the bound on the kernel's
// work whatever a model sends).
func BenchmarkNearestMiss(b *testing.B) {
	s := strings.Repeat(strings.Repeat("x", 300)+"\n", 20000)
	old := strings.Repeat(strings.Repeat("y", 299)+"x\n", 200)
	for b.Loop() {
		if _, err := replaceOnce("f", s, old, ""); err == nil {
			b.Fatal("replaced")
		}
	}
}
