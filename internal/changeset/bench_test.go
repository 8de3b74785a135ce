package changeset

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchSet builds a workspace of n files in 10 directories and a change
// set modifying all of them (one line changed in a 40-line file).
func benchSet(b *testing.B, n int) *ChangeSet {
	b.Helper()
	ws := filepath.Join(b.TempDir(), "ws")
	var body []byte
	for i := range 40 {
		body = fmt.Appendf(body, "line %d of a typical source file, with some text\n", i)
	}
	for i := range n {
		p := filepath.Join(ws, fmt.Sprintf("d%d/f%04d.go", i%10, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cs, err := Begin(b.Context(), ws, filepath.Join(b.TempDir(), "cs"))
	if err != nil {
		b.Fatal(err)
	}
	changed := append([]byte(nil), body...)
	copy(changed[len(changed)/2:], "CHANGED")
	for i := range n {
		if err := cs.WriteFile(fmt.Sprintf("d%d/f%04d.go", i%10, i), changed, 0); err != nil {
			b.Fatal(err)
		}
	}
	// Flush the set-up's writes so the benchmark measures only its own.
	if err := cs.real.Sync(); err != nil {
		b.Fatal(err)
	}
	return cs
}

func BenchmarkDiff1000(b *testing.B) {
	cs := benchSet(b, 1000)
	b.ResetTimer()
	for b.Loop() {
		d, err := cs.Diff(b.Context())
		if err != nil || len(d) == 0 {
			b.Fatal(err)
		}
	}
}

func BenchmarkApply1000(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		cs := benchSet(b, 1000)
		b.StartTimer()
		applied, err := cs.Apply(b.Context())
		if err != nil || len(applied) != 1000 {
			b.Fatalf("%d applied: %v", len(applied), err)
		}
	}
}

// BenchmarkBegin1000 records the base of a 1,000-file workspace (stat and
// SHA-256 of each file).
func BenchmarkBegin1000(b *testing.B) {
	ws := filepath.Join(b.TempDir(), "ws")
	body := make([]byte, 2000)
	for i := range 1000 {
		p := filepath.Join(ws, fmt.Sprintf("d%d/f%04d.go", i%10, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := Begin(b.Context(), ws, filepath.Join(b.TempDir(), "cs")); err != nil {
			b.Fatal(err)
		}
	}
}
