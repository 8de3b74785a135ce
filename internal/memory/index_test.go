package memory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, rel, s string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, root string, e Embedder) *Index {
	t.Helper()
	x, err := Open(t.Context(), Options{Root: root, DB: filepath.Join(t.TempDir(), "index.db"), Embedder: e})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func TestSplitBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Top\n\nintro paragraph\n\n## Sub\n\n")
	for i := range 400 {
		b.WriteString("a line of words about the garden number ")
		b.WriteString(strings.Repeat("x", i%50))
		b.WriteString("\n")
	}
	b.WriteString(strings.Repeat("é", 5000) + "\n") // one huge line, multibyte
	chunks := Split(b.String(), 500)
	if len(chunks) < 10 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for _, c := range chunks {
		if len(c.Text) > 500 {
			t.Errorf("chunk at line %d is %d bytes", c.StartLine, len(c.Text))
		}
		if !strings.HasPrefix(c.Heading, "Top") {
			t.Errorf("heading %q", c.Heading)
		}
		if !strings.Contains(c.Text, "é") && strings.ContainsRune(c.Text, '\uFFFD') {
			t.Errorf("broken rune")
		}
	}
	if chunks[0].Heading != "Top" || chunks[1].Heading != "Top > Sub" {
		t.Errorf("headings %q %q", chunks[0].Heading, chunks[1].Heading)
	}
	// Chunks cut for size overlap: a chunk starts at or before the
	// line its predecessor ends at.
	overlaps := 0
	for i := 2; i < len(chunks); i++ {
		if chunks[i].StartLine <= chunks[i-1].EndLine {
			overlaps++
		}
	}
	if overlaps == 0 {
		t.Error("no overlap between chunks cut for size")
	}
}

func TestSyncIncremental(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nThe person likes green tea.\n")
	write(t, root, "memory/2026-01-02.md", "# Jan 2\n\nBought a bicycle.\n")
	write(t, root, "memory/notes/cars.md", "# Car\n\nThe car needs new tyres.\n")
	write(t, root, "notmemory.md", "secret plans\n")
	x := open(t, root, &Local{})
	ctx := t.Context()
	rep, err := x.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Indexed != 3 || rep.Unchanged != 0 {
		t.Fatalf("first sync %+v", rep)
	}
	if rep, _ = x.Sync(ctx); rep.Indexed != 0 || rep.Unchanged != 3 || rep.Embedded != 0 {
		t.Fatalf("second sync %+v", rep)
	}
	write(t, root, "memory/2026-01-02.md", "# Jan 2\n\nBought a red bicycle.\n")
	if rep, _ = x.Sync(ctx); rep.Indexed != 1 || rep.Unchanged != 2 {
		t.Fatalf("after an edit %+v", rep)
	}
	res, err := x.Search(ctx, Query{Text: "red bicycle", Mode: FullText})
	if err != nil || len(res.Hits) != 1 || res.Hits[0].Path != "memory/2026-01-02.md" || res.Hits[0].Line != 1 {
		t.Fatalf("search %+v %v", res, err)
	}
	// A rename: the old path goes, the new one comes, its vector from
	// the cache.
	if err := os.Rename(filepath.Join(root, "memory/notes/cars.md"), filepath.Join(root, "memory/notes/vehicles.md")); err != nil {
		t.Fatal(err)
	}
	if rep, _ = x.Sync(ctx); rep.Indexed != 1 || rep.Removed != 1 || rep.Embedded != 0 {
		t.Fatalf("after a rename %+v", rep)
	}
	if res, _ = x.Search(ctx, Query{Text: "tyres"}); len(res.Hits) != 1 || res.Hits[0].Path != "memory/notes/vehicles.md" {
		t.Fatalf("after a rename %+v", res)
	}
	os.Remove(filepath.Join(root, "memory/notes/vehicles.md"))
	if rep, _ = x.Sync(ctx); rep.Removed != 1 {
		t.Fatalf("after a delete %+v", rep)
	}
	if res, _ = x.Search(ctx, Query{Text: "tyres"}); len(res.Hits) != 0 {
		t.Fatalf("deleted file still found %+v", res)
	}
	if res, _ = x.Search(ctx, Query{Text: "secret plans", Mode: FullText}); len(res.Hits) != 0 {
		t.Fatalf("a file outside the memory was indexed: %+v", res)
	}
}

func TestSyncRefusesHugeFile(t *testing.T) {
	root := t.TempDir()
	write(t, root, "memory/big.md", strings.Repeat("word ", MaxFileBytes/5+10))
	write(t, root, "MEMORY.md", "# Core\n\nsmall\n")
	x := open(t, root, nil)
	rep, err := x.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != "memory/big.md" || !strings.Contains(rep.Skipped[0].Reason, "split it") || rep.Indexed != 1 {
		t.Fatalf("%+v", rep)
	}
}

func TestFullTextOnlySaysSo(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nThe person likes green tea.\n")
	x := open(t, root, nil)
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := x.Search(t.Context(), Query{Text: "tea"})
	if err != nil || res.Mode != FullText || !strings.Contains(res.Note, "full text only") || len(res.Hits) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

// countingEmbedder is an Embedder whose model name a test changes.
type countingEmbedder struct {
	model string
	n     int
}

func (c *countingEmbedder) Model() string { return c.model }
func (c *countingEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	c.n += len(texts)
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0}
	}
	return out, nil
}

func TestModelChangeReembeds(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# A\n\none\n\n# B\n\ntwo\n")
	e := &countingEmbedder{model: "m1"}
	x := open(t, root, e)
	if _, err := x.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e.n != 2 {
		t.Fatalf("embedded %d", e.n)
	}
	x.Sync(t.Context())
	if e.n != 2 {
		t.Fatalf("unchanged chunks embedded again: %d", e.n)
	}
	e.model = "m2"
	if rep, _ := x.Sync(t.Context()); rep.Embedded != 2 || e.n != 4 {
		t.Fatalf("a new model did not embed again: %+v %d", rep, e.n)
	}
}

func TestGet(t *testing.T) {
	root := t.TempDir()
	write(t, root, "MEMORY.md", "# Core\n\nintro\n\n## Pets\n\nA cat named Miso.\n\n### Vet\n\nDr. Lee.\n\n## Work\n\nfluffy\n")
	write(t, root, "SOUL.md", "persona\n")
	s, err := Get(root, "MEMORY.md", "pets")
	if err != nil || s.Line != 5 || s.EndLine != 12 || !strings.Contains(s.Text, "Dr. Lee") || strings.Contains(s.Text, "fluffy") {
		t.Fatalf("%+v %v", s, err)
	}
	for _, p := range []string{"SOUL.md", "../x/MEMORY.md", "memory/../SOUL.md", "/etc/passwd", "memory/x.txt"} {
		if _, err := Get(root, p, ""); !errors.Is(err, ErrOutside) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := Get(root, "MEMORY.md", "nothing"); !errors.Is(err, ErrNoSection) {
		t.Errorf("%v", err)
	}
	// A link out of the memory is not followed.
	os.MkdirAll(filepath.Join(root, "memory"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(root, "memory/link.md"))
	if _, err := Get(root, "memory/link.md", ""); err == nil {
		t.Error("a symbolic link was followed")
	}
}
