package memory

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Mode is how a search ranks.
type Mode string

// The search modes.
const (
	// Hybrid fuses full text and vector scores (a weighted sum).
	Hybrid Mode = "hybrid"
	// FullText ranks by BM25 alone.
	FullText Mode = "fulltext"
	// Vector ranks by cosine similarity alone.
	Vector Mode = "vector"
)

// Query is one search.
type Query struct {
	Text string
	// K is how many hits to return (default 5, at most 50).
	K int
	// Path keeps files whose path is Path or under it (a directory).
	Path string
	// Since and Until keep daily logs dated within them (inclusive);
	// files without a date are left out when either is set.
	Since, Until time.Time
	// Mode defaults to Hybrid; without vectors every mode is FullText.
	Mode Mode
	// TextWeight, for measurement, is the full text's weight in the
	// hybrid's sum (0 < TextWeight < 1); 0 means DefaultTextWeight.
	TextWeight float64
	// RRF, for measurement, fuses by reciprocal rank instead.
	RRF bool
}

// DefaultTextWeight is the full text's weight in the hybrid, the
// vectors' being the rest: chosen on the labelled retrieval set (the
// package doc says why).
const DefaultTextWeight = 0.3

// Hit is one passage found.
type Hit struct {
	Path    string
	Heading string
	// Line and EndLine are the passage's lines in Path (1-based).
	Line, EndLine int
	Text          string
	Snippet       string
	Score         float64
}

// Result is a search's hits and how they were ranked.
type Result struct {
	Hits []Hit
	// Mode is the ranking used; FullText with Note set when vectors were
	// asked for but there are none.
	Mode Mode
	Note string
}

// candidates is how many hits each ranking contributes to the fusion.
const candidates = 50

// rrfK is reciprocal rank fusion's constant (Cormack et al.'s 60).
const rrfK = 60

// Search finds the passages best matching q.
func (x *Index) Search(ctx context.Context, q Query) (Result, error) {
	k := q.K
	if k <= 0 {
		k = 5
	}
	k = min(k, 50)
	mode := q.Mode
	if mode == "" {
		mode = Hybrid
	}
	res := Result{Mode: mode}
	var qv []float32
	if mode != FullText {
		if x.o.Embedder == nil {
			res.Mode, res.Note = FullText, "full text only: no embedder is configured"
		} else if vs, err := x.o.Embedder.Embed(ctx, []string{q.Text}); err != nil || len(vs) != 1 {
			res.Mode, res.Note = FullText, fmt.Sprintf("full text only: the query could not be embedded (%v)", err)
		} else if x.vectorCount() == 0 {
			res.Mode, res.Note = FullText, "full text only: no passage has a vector yet"
		} else {
			qv = vs[0]
		}
	}
	var ft []int64
	var ftScore map[int64]float64
	if res.Mode != Vector {
		var err error
		if ft, ftScore, err = x.fullText(ctx, q); err != nil {
			return res, err
		}
	}
	var vr []int64
	var vScore map[int64]float64
	if qv != nil {
		vr, vScore = x.nearest(q, qv)
	}
	var ids []int64
	score := map[int64]float64{}
	switch {
	case res.Mode == FullText:
		ids, score = ft, ftScore
	case res.Mode == Vector:
		ids, score = vr, vScore
	case !q.RRF:
		w := q.TextWeight
		if w <= 0 || w >= 1 {
			w = DefaultTextWeight
		}
		ids, score = weighted(ft, ftScore, vr, vScore, w)
	default:
		for r, id := range ft {
			score[id] += 1 / float64(rrfK+r+1)
		}
		for r, id := range vr {
			score[id] += 1 / float64(rrfK+r+1)
		}
		ids = sortedByScore(score)
	}
	if len(ids) > k {
		ids = ids[:k]
	}
	for _, id := range ids {
		h, err := x.hit(ctx, id, q.Text)
		if err != nil {
			return res, err
		}
		h.Score = score[id]
		res.Hits = append(res.Hits, h)
	}
	return res, nil
}

func (x *Index) vectorCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.vecs.len()
}

// weighted fuses min-max normalized scores, w for full text.
func weighted(ft []int64, fs map[int64]float64, vr []int64, vs map[int64]float64, w float64) ([]int64, map[int64]float64) {
	out := map[int64]float64{}
	norm := func(ids []int64, s map[int64]float64, weight float64) {
		if len(ids) == 0 {
			return
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, id := range ids {
			lo, hi = math.Min(lo, s[id]), math.Max(hi, s[id])
		}
		for _, id := range ids {
			n := 1.0
			if hi > lo {
				n = (s[id] - lo) / (hi - lo)
			}
			out[id] += weight * n
		}
	}
	norm(ft, fs, w)
	norm(vr, vs, 1-w)
	return sortedByScore(out), out
}

func sortedByScore(s map[int64]float64) []int64 {
	ids := make([]int64, 0, len(s))
	for id := range s {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if s[ids[i]] != s[ids[j]] {
			return s[ids[i]] > s[ids[j]]
		}
		return ids[i] < ids[j]
	})
	return ids
}

// ftsQuery is q's words as an FTS5 query: any of them, each quoted so
// that nothing in a query is FTS syntax.
func ftsQuery(q string) string {
	var parts []string
	for _, w := range Tokenize(q) {
		parts = append(parts, `"`+strings.ReplaceAll(w, `"`, `""`)+`"`)
	}
	return strings.Join(parts, " OR ")
}

func (q Query) filterSQL() (string, []any) {
	var where []string
	var args []any
	if p := strings.Trim(q.Path, "/"); p != "" && p != "." {
		where = append(where, `(c.path = ? OR substr(c.path, 1, ?) = ?)`)
		args = append(args, p, len(p)+1, p+"/")
	}
	if !q.Since.IsZero() {
		where = append(where, `f.day != '' AND f.day >= ?`)
		args = append(args, q.Since.Format(time.DateOnly))
	}
	if !q.Until.IsZero() {
		where = append(where, `f.day != '' AND f.day <= ?`)
		args = append(args, q.Until.Format(time.DateOnly))
	}
	if len(where) == 0 {
		return "", nil
	}
	return " AND " + strings.Join(where, " AND "), args
}

func (q Query) keeps(path, day string) bool {
	if p := strings.Trim(q.Path, "/"); p != "" && p != "." && path != p && !strings.HasPrefix(path, p+"/") {
		return false
	}
	if !q.Since.IsZero() && (day == "" || day < q.Since.Format(time.DateOnly)) {
		return false
	}
	if !q.Until.IsZero() && (day == "" || day > q.Until.Format(time.DateOnly)) {
		return false
	}
	return true
}

// fullText is the BM25 ranking (best first) and each hit's score
// (higher is better).
func (x *Index) fullText(ctx context.Context, q Query) ([]int64, map[int64]float64, error) {
	m := ftsQuery(q.Text)
	if m == "" {
		return nil, map[int64]float64{}, nil
	}
	filter, args := q.filterSQL()
	rows, err := x.db.QueryContext(ctx, `SELECT c.id, bm25(chunks_fts) AS r FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid
		JOIN files f ON f.path = c.path WHERE chunks_fts MATCH ?`+filter+` ORDER BY r LIMIT ?`, append(append([]any{m}, args...), candidates)...)
	if err != nil {
		return nil, nil, fmt.Errorf("memory: full-text search: %w", err)
	}
	defer rows.Close()
	var ids []int64
	score := map[int64]float64{}
	for rows.Next() {
		var id int64
		var r float64
		if err := rows.Scan(&id, &r); err != nil {
			return nil, nil, fmt.Errorf("memory: full-text search: %w", err)
		}
		ids = append(ids, id)
		score[id] = -r // bm25() is lower for better matches
	}
	return ids, score, rows.Err()
}

// nearest is the vector ranking: the candidates most similar to qv.
func (x *Index) nearest(q Query, qv []float32) ([]int64, map[int64]float64) {
	type sc struct {
		id int64
		s  float32
	}
	x.mu.Lock()
	top := make([]sc, 0, candidates+1)
	t := x.vecs
	if t.dim == len(qv) {
		for slot := range t.ids {
			s := dot(t.row(slot), qv)
			if len(top) == candidates && s <= top[len(top)-1].s {
				continue
			}
			m := t.meta[slot]
			if !q.keeps(m.path, m.day) {
				continue
			}
			id := t.ids[slot]
			i := sort.Search(len(top), func(i int) bool { return top[i].s < s || (top[i].s == s && top[i].id > id) })
			top = append(top, sc{})
			copy(top[i+1:], top[i:])
			top[i] = sc{id, s}
			if len(top) > candidates {
				top = top[:candidates]
			}
		}
	}
	x.mu.Unlock()
	ids := make([]int64, len(top))
	score := make(map[int64]float64, len(top))
	for i, t := range top {
		ids[i], score[t.id] = t.id, float64(t.s)
	}
	return ids, score
}

func (x *Index) hit(ctx context.Context, id int64, query string) (Hit, error) {
	var h Hit
	err := x.db.QueryRowContext(ctx, `SELECT path, heading, start_line, end_line, text FROM chunks WHERE id = ?`, id).
		Scan(&h.Path, &h.Heading, &h.Line, &h.EndLine, &h.Text)
	if err != nil {
		return h, fmt.Errorf("memory: read a hit: %w", err)
	}
	h.Snippet = snippet(h.Text, query, 240)
	return h, nil
}

// snippet is up to n bytes of text around the first query word in it.
func snippet(text, query string, n int) string {
	lower := strings.ToLower(text)
	at := -1
	for _, w := range Tokenize(query) {
		if i := strings.Index(lower, w); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	start := 0
	if at > n/3 {
		start = at - n/3
	}
	for start > 0 && start < len(text) && (text[start]&0xC0) == 0x80 {
		start--
	}
	s := text[start:]
	s = cutRunes(s, n)
	s = strings.Join(strings.Fields(s), " ")
	if start > 0 {
		s = "…" + s
	}
	if start+n < len(text) {
		s += "…"
	}
	return s
}
