package memory

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// writeCorpus writes c's files under a new workspace.
func writeCorpus(tb testing.TB, c corpus) string {
	tb.Helper()
	root := tb.TempDir()
	for p, s := range c.files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// scores are recall@5 and MRR (over the top 10) of a set of questions.
type scores struct{ recall5, mrr float64 }

func evaluate(ctx context.Context, tb testing.TB, x *Index, qs []question, q Query) scores {
	tb.Helper()
	var s scores
	for _, lq := range qs {
		q.Text, q.K = lq.text, 10
		res, err := x.Search(ctx, q)
		if err != nil {
			tb.Fatal(err)
		}
		for r, h := range res.Hits {
			if h.Path == lq.path && h.Line <= lq.line && lq.line <= h.EndLine {
				if r < 5 {
					s.recall5++
				}
				s.mrr += 1 / float64(r+1)
				break
			}
		}
	}
	s.recall5 /= float64(len(qs))
	s.mrr /= float64(len(qs))
	return s
}

// TestRetrievalEval runs the labelled retrieval set and reports recall@5
// and MRR per mode (go test -run TestRetrievalEval -v). It fails if the
// hybrid, the default, does not beat full text alone.
func TestRetrievalEval(t *testing.T) {
	if testing.Short() {
		t.Skip("indexes a few thousand notes")
	}
	c := genCorpus(1, 3000, 240)
	paras := 0
	for _, q := range c.questions {
		if q.paraphrase {
			paras++
			if sharesWord(q.text, passage(t, c, q)) {
				t.Fatalf("paraphrase %q shares a word with its passage %q", q.text, passage(t, c, q))
			}
		}
	}
	if len(c.questions) < 200 || 3*paras < len(c.questions) {
		t.Fatalf("%d questions, %d paraphrases", len(c.questions), paras)
	}
	root := writeCorpus(t, c)
	x := open(t, root, &Local{})
	ctx := t.Context()
	rep, err := x.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("corpus: %d entries in %d files, %d chunks; %d questions, %d paraphrases", c.entries, len(c.files), rep.Chunks, len(c.questions), paras)
	var literal, para []question
	for _, q := range c.questions {
		if q.paraphrase {
			para = append(para, q)
		} else {
			literal = append(literal, q)
		}
	}
	modes := []struct {
		name string
		q    Query
	}{
		{"full text", Query{Mode: FullText}},
		{"vectors", Query{Mode: Vector}},
		{"hybrid", Query{Mode: Hybrid}},
		{"RRF", Query{Mode: Hybrid, RRF: true}},
		{"weighted 0.2", Query{Mode: Hybrid, TextWeight: 0.2}},
		{"weighted 0.4", Query{Mode: Hybrid, TextWeight: 0.4}},
		{"weighted 0.5", Query{Mode: Hybrid, TextWeight: 0.5}},
		{"weighted 0.7", Query{Mode: Hybrid, TextWeight: 0.7}},
	}
	got := map[string]scores{}
	for _, m := range modes {
		all := evaluate(ctx, t, x, c.questions, m.q)
		l := evaluate(ctx, t, x, literal, m.q)
		p := evaluate(ctx, t, x, para, m.q)
		got[m.name] = all
		t.Logf("%-13s all: recall@5 %.3f MRR %.3f | literal: %.3f %.3f | paraphrase: %.3f %.3f", m.name, all.recall5, all.mrr, l.recall5, l.mrr, p.recall5, p.mrr)
	}
	if h, f := got["hybrid"], got["full text"]; h.recall5 <= f.recall5 || h.mrr <= f.mrr {
		t.Errorf("the hybrid (%+v) does not beat full text alone (%+v)", h, f)
	}
}

// passage is the text of q's labelled entry.
func passage(t *testing.T, c corpus, q question) string {
	lines := splitLines(c.files[q.path])
	if q.line-1 >= len(lines) {
		t.Fatalf("question %q points past %s", q.text, q.path)
	}
	return lines[q.line-1]
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
