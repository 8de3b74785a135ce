package audit

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// smallChunks makes rowsPrefetch read in tiny batches and chunks, so that
// short test logs are read by both readers across many chunks.
func smallChunks(t *testing.T, batch, chunk int) {
	t.Helper()
	b, c := prefetchBatch, prefetchChunk
	prefetchBatch, prefetchChunk = batch, chunk
	t.Cleanup(func() { prefetchBatch, prefetchChunk = b, c })
}

// The tamper tests give the same results when the entries are read in
// many chunks by two readers.
func TestTamperSmallChunks(t *testing.T) {
	for _, sz := range [][2]int{{3, 4}, {1, 1}, {4, 7}} {
		t.Run(fmt.Sprintf("batch%d-chunk%d", sz[0], sz[1]), func(t *testing.T) {
			smallChunks(t, sz[0], sz[1])
			t.Run("tamper", TestTamper)
			t.Run("rewritten", TestRewrittenChainAndSwap)
			t.Run("prune", TestPruneExportProve)
			t.Run("append", TestAppendVerify)
		})
	}
}

// rowsPrefetch gives exactly the rows (and order) rows gives, whatever
// the chunking, on damaged databases too.
func TestPrefetchSameRows(t *testing.T) {
	l, opts := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l, 100, KindGatePolicy)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, opts.Path,
		`DELETE FROM entries WHERE seq IN (5, 17, 18, 64)`,
		`UPDATE entries SET seq = -3 WHERE seq = 30`,
		`UPDATE entries SET seq = 0 WHERE seq = 31`,
		`UPDATE entries SET seq = 5000 WHERE seq = 40`,
		`UPDATE entries SET seq = 9223372036854775807 WHERE seq = 41`,
		`UPDATE entries SET hash = x'' WHERE seq = 50`,
		`UPDATE entries SET body = '' WHERE seq = 51`,
	)
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	collect := func(read func(context.Context, uint64, func(row) error) error, from uint64, prefetch bool) []string {
		var out []string
		if err := read(t.Context(), from, func(rw row) error {
			if prefetch && rw.hash == nil {
				t.Fatalf("seq %d: nil hash", rw.seq)
			}
			out = append(out, fmt.Sprintf("%d %x %s", rw.seq, rw.hash, rw.body))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, from := range []uint64{1, 2, 9, 50, 99, 101, 6000} {
		want := collect(r.rows, from, false)
		for _, sz := range [][2]int{{1024, 16384}, {3, 4}, {1, 1}, {5, 2}, {7, 33}} {
			smallChunks(t, sz[0], sz[1])
			if got := collect(r.rowsPrefetch, from, true); !slices.Equal(got, want) {
				t.Fatalf("from %d, batch %d, chunk %d: prefetch gave %d rows\n%q\nwant %d\n%q", from, sz[0], sz[1], len(got), got, len(want), want)
			}
		}
	}
	// Stopping early returns fn's error and leaves no reader running.
	smallChunks(t, 2, 3)
	stopErr := fmt.Errorf("stop")
	n := 0
	err = r.rowsPrefetch(t.Context(), 1, func(rw row) error {
		if n++; n == 20 {
			return stopErr
		}
		return nil
	})
	if err != stopErr || n != 20 {
		t.Fatalf("stopped at %d: %v", n, err)
	}
}
