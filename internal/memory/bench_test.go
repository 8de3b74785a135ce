package memory

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkIndexInitial is the first Sync of a generated memory: read,
// chunk, full-text index, learn the local model, embed (chunks/s).
func BenchmarkIndexInitial(b *testing.B) {
	c := genCorpus(3, 3000, 0)
	root := writeCorpus(b, c)
	chunks := 0
	start := time.Now()
	for b.Loop() {
		x, err := Open(b.Context(), Options{Root: root, DB: filepath.Join(b.TempDir(), "index.db"), Embedder: &Local{}})
		if err != nil {
			b.Fatal(err)
		}
		rep, err := x.Sync(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		chunks += rep.Chunks
		x.Close()
	}
	b.ReportMetric(float64(chunks)/time.Since(start).Seconds(), "chunks/s")
}

// BenchmarkSaveToSearchable is the time from a file's write to a search
// finding its new word, through the watcher (median and p99): a daily
// log, and a doc in a memory.sources folder.
func BenchmarkSaveToSearchable(b *testing.B) {
	b.Run("file=memory", func(b *testing.B) {
		root := writeCorpus(b, genCorpus(4, 3000, 0))
		benchSave(b, root, nil, filepath.Join(root, "memory", "2030-01-01.md"))
	})
	b.Run("file=source", func(b *testing.B) {
		root, docs := writeCorpus(b, genCorpus(4, 3000, 0)), b.TempDir()
		benchSave(b, root, []Source{{Name: "docs", Dir: docs}}, filepath.Join(docs, "guide", "new.md"))
	})
}

// benchSave writes file again and again, each time with a new word, and
// measures until a search finds it.
func benchSave(b *testing.B, root string, sources []Source, file string) {
	x, err := Open(b.Context(), Options{Root: root, DB: filepath.Join(b.TempDir(), "index.db"), Embedder: &Local{}, Sources: sources})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		b.Fatal(err)
	}
	if _, err := x.Sync(b.Context()); err != nil {
		b.Fatal(err)
	}
	synced := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.Watch(b.Context(), func(SyncReport, error) {
			select {
			case synced <- struct{}{}:
			default:
			}
		})
	}()
	<-synced // the watcher's first scan: its directories are watched
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		word := fmt.Sprintf("zzword%d", i)
		start := time.Now()
		if err := os.WriteFile(file, []byte("# New\n\nsaw "+word+" today\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		for {
			<-synced
			res, err := x.Search(b.Context(), Query{Text: word, Mode: FullText})
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Hits) > 0 {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

// BenchmarkSearch is one hybrid search's latency at about 10k and 100k
// chunks (p50 and p99 over the labelled questions).
func BenchmarkSearch(b *testing.B) {
	for _, n := range []int{7500, 75000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			c := genCorpus(5, n, 240)
			root := writeCorpus(b, c)
			x, err := Open(b.Context(), Options{Root: root, DB: filepath.Join(b.TempDir(), "index.db"), Embedder: &Local{}})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			rep, err := x.Sync(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			i := 0
			for b.Loop() {
				q := c.questions[i%len(c.questions)]
				i++
				start := time.Now()
				if _, err := x.Search(b.Context(), Query{Text: q.text}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(rep.Chunks), "chunks")
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkOnDemandSearch is a session's memory.search as the kernel
// runs it: open the index, the hash scan of every file, the search,
// close (nothing changed since the last call).
func BenchmarkOnDemandSearch(b *testing.B) {
	c := genCorpus(6, 3000, 240)
	root := writeCorpus(b, c)
	d := OnDemand{Options: Options{Root: root, DB: filepath.Join(b.TempDir(), "index.db")}, NewEmbedder: func() Embedder { return &Local{} }}
	if _, err := d.Search(b.Context(), Query{Text: "warm up"}); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		q := c.questions[i%len(c.questions)]
		i++
		start := time.Now()
		if _, err := d.Search(b.Context(), Query{Text: q.text}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}
