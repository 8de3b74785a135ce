package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// testLog opens a log in a fresh directory.
func testLog(t *testing.T, opts Options) (*Log, Options) {
	t.Helper()
	dir := t.TempDir()
	if opts.Path == "" {
		opts.Path = filepath.Join(dir, "audit.db")
		opts.KeyDir = filepath.Join(dir, "keys")
	}
	l, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, opts
}

func appendN(t testing.TB, l *Log, n int, kind Kind) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), Entry{Session: "s1", Kind: kind, Actor: "agent", Payload: map[string]any{"i": i, "argv": []string{"ls", "-l"}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func verifyDB(t *testing.T, opts Options, full bool) (Report, error) {
	t.Helper()
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	k, err := LoadKey(opts.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := TrustedCheckpoints(opts.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	return r.Verify(t.Context(), VerifyOptions{Verifier: k.Verifier, Full: full, Trusted: trusted, StateDir: opts.KeyDir})
}

func TestAppendVerify(t *testing.T) {
	l, opts := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l, 25, KindExecStart)
	appendN(t, l, 3, KindGatePolicy)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyDB(t, opts, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Size != 28 || rep.Newest.Size != 28 || rep.From != 1 {
		t.Fatalf("report %+v", rep)
	}
	// Incremental: nothing new after the recorded checkpoint.
	rep, err = verifyDB(t, opts, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.From != 29 || rep.To != 28 {
		t.Fatalf("incremental report %+v", rep)
	}
	// Reopen and continue the same chain.
	l2, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l2, 5, KindExecEnd)
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = verifyDB(t, opts, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.From != 29 || rep.To != 33 {
		t.Fatalf("incremental report %+v", rep)
	}
}

// sqlExec damages the database from outside the package's API.
func sqlExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestTamper(t *testing.T) {
	cases := []struct {
		name   string
		stmts  []string
		seq    uint64
		damage Damage
		rmKeep bool // remove the checkpoint copy under keys/
	}{
		{"edited payload", []string{`UPDATE entries SET body = replace(body, '"ls"', '"rm"') WHERE seq = 7`}, 7, DamageEditedEntry, false},
		{"edited hash", []string{`UPDATE entries SET hash = zeroblob(32) WHERE seq = 7`}, 7, DamageEditedHash, false},
		{"edited last entry", []string{`UPDATE entries SET body = replace(body, '"ls"', '"rm"') WHERE seq = 40`}, 40, DamageEditedEntry, false},
		{"deleted entry", []string{`DELETE FROM entries WHERE seq = 7`}, 7, DamageMissing, false},
		{"deleted first entry", []string{`DELETE FROM entries WHERE seq = 1`}, 1, DamageMissing, false},
		{"reordered", []string{`UPDATE entries SET seq = -1 WHERE seq = 7`, `UPDATE entries SET seq = 7 WHERE seq = 8`, `UPDATE entries SET seq = 8 WHERE seq = -1`}, 7, DamageReordered, false},
		{"deleted entry at a chunk start", []string{`DELETE FROM entries WHERE seq = 9`}, 9, DamageMissing, false},
		{"reordered across chunks", []string{`UPDATE entries SET seq = -1 WHERE seq = 8`, `UPDATE entries SET seq = 8 WHERE seq = 9`, `UPDATE entries SET seq = 9 WHERE seq = -1`}, 8, DamageReordered, false},
		{"moved before the first entry", []string{`UPDATE entries SET seq = 0 WHERE seq = 13`}, 13, DamageMissing, false},
		{"moved past the end", []string{`UPDATE entries SET seq = 1000000 WHERE seq = 13`}, 13, DamageMissing, false},
		{"truncated tail", []string{`DELETE FROM entries WHERE seq > 35`}, 36, DamageTruncated, false},
		{"truncated tail and checkpoints", []string{`DELETE FROM entries WHERE seq > 35`, `DELETE FROM checkpoints WHERE size > 35`}, 36, DamageTruncated, false},
		{"bad checkpoint signature", []string{`UPDATE checkpoints SET note = replace(note, char(10) || '20' || char(10), char(10) || '21' || char(10)) WHERE size = 20`}, 20, DamageCheckpoint, false},
		{"pruned without pruning", []string{`DELETE FROM entries WHERE seq <= 20`, `DELETE FROM checkpoints WHERE size < 20`, `INSERT INTO meta VALUES ('anchor', '20')`}, 21, DamageAnchor, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, opts := testLog(t, Options{CheckpointEvery: 10})
			appendN(t, l, 40, KindGatePolicy) // synchronous: checkpoints at 10, 20, 30, 40
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := verifyDB(t, opts, true); err != nil {
				t.Fatalf("before damage: %v", err)
			}
			sqlExec(t, opts.Path, tc.stmts...)
			_, err := verifyDB(t, opts, true)
			var de *DamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("verify after damage: %v, want a DamageError", err)
			}
			if de.Seq != tc.seq || de.Damage != tc.damage {
				t.Fatalf("got %v\nwant seq %d, %s", err, tc.seq, tc.damage)
			}
		})
	}
}

func TestRewrittenChainAndSwap(t *testing.T) {
	// A self-consistent chain made with another key replaces the database.
	l, opts := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l, 20, KindExecStart)
	l.Close()
	other, otherOpts := testLog(t, Options{})
	appendN(t, other, 30, KindExecStart)
	other.Close()
	b, err := os.ReadFile(otherOpts.Path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(opts.Path + "-wal")
	os.Remove(opts.Path + "-shm")
	if err := os.WriteFile(opts.Path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = verifyDB(t, opts, true)
	var de *DamageError
	if !errors.As(err, &de) || de.Damage != DamageForeign {
		t.Fatalf("swapped database: %v", err)
	}
	// An older copy of our own database put back.
	l2, opts2 := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l2, 20, KindExecStart)
	l2.Close()
	old, _ := os.ReadFile(opts2.Path)
	l3, err := Open(t.Context(), opts2)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l3, 20, KindExecStart)
	l3.Close()
	os.WriteFile(opts2.Path, old, 0o600)
	_, err = verifyDB(t, opts2, true)
	if !errors.As(err, &de) || de.Damage != DamageTruncated || de.Seq != 21 {
		t.Fatalf("rolled back database: %v", err)
	}
}

func TestPruneExportProve(t *testing.T) {
	// A fake clock, read by the background writer too.
	var hours atomic.Int64
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return start.Add(time.Duration(hours.Load()) * time.Hour) }
	l, opts := testLog(t, Options{CheckpointEvery: 7, Now: clock})
	for i := 0; i < 50; i++ {
		hours.Add(1)
		appendN(t, l, 1, KindGatePolicy)
	}
	res, err := l.Prune(t.Context(), clock().Add(-20*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Anchor != 29 || res.Deleted != 29 || res.Seq != 51 {
		t.Fatalf("prune: %+v", res)
	}
	appendN(t, l, 5, KindExecStart)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyDB(t, opts, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.From != 30 || rep.Size != 56 || rep.Anchor != 29 {
		t.Fatalf("report %+v", rep)
	}
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	k, _ := LoadKey(opts.KeyDir)
	for _, seq := range []uint64{30, 31, 40, 51, 56} {
		p, err := r.Prove(t.Context(), seq, k.Verifier, nil)
		if err != nil {
			t.Fatalf("prove %d: %v", seq, err)
		}
		if p.Entry.Seq != seq {
			t.Fatalf("proof of %d holds entry %d", seq, p.Entry.Seq)
		}
	}
	if _, err := r.Prove(t.Context(), 10, k.Verifier, nil); err == nil {
		t.Fatal("proof of a pruned entry")
	}
	dir := filepath.Join(t.TempDir(), "export")
	ex, err := r.Export(t.Context(), dir, k.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Entries != 27 {
		t.Fatalf("export %+v", ex)
	}
	if _, err := VerifyExport(t.Context(), dir, VerifyOptions{Verifier: k.Verifier}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentAppend appends from many goroutines, mixing kinds, and
// checks the result is one gapless, verifiable chain.
func TestConcurrentAppend(t *testing.T) {
	l, opts := testLog(t, Options{FlushEntries: 7, MaxPending: 20, CheckpointEvery: 13, FlushInterval: time.Millisecond})
	const workers, each = 8, 60
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < each; i++ {
				kind := KindExecStart
				if i%5 == 0 {
					kind = KindGatePolicy
				}
				if _, err := l.Append(context.Background(), Entry{Kind: kind, Actor: "agent", Payload: map[string]int{"i": i}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyDB(t, opts, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Size != workers*each {
		t.Fatalf("size %d, want %d", rep.Size, workers*each)
	}
}

// TestTimedFlushAndCheckpoint: buffered entries reach the disk and a
// checkpoint covers them without any further Append, Flush or Close.
func TestTimedFlushAndCheckpoint(t *testing.T) {
	l, opts := testLog(t, Options{FlushInterval: 5 * time.Millisecond, CheckpointAfter: 10 * time.Millisecond, CheckpointEvery: 1 << 30})
	appendN(t, l, 3, KindExecStart)
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := r.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		trusted, _ := TrustedCheckpoints(opts.KeyDir)
		if s.Entries == 3 && s.Checkpoint == 3 && len(trusted) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %+v, checkpoint copy %q", s, trusted)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoGoroutineLeak: the background writer and the verification's
// reader goroutine end with Close and Verify, also when Verify stops at
// damage midway.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	l, opts := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l, 8000, KindExecStart) // more batches than the prefetch channel holds
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, opts.Path, `UPDATE entries SET body = replace(body, '"ls"', '"rm"') WHERE seq = 5`)
	if _, err := verifyDB(t, opts, true); !errors.Is(err, ErrDamaged) {
		t.Fatalf("verify: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLockWait: a second writer waits for the first to close when asked
// to, and fails at once (ErrLocked) when not.
func TestLockWait(t *testing.T) {
	first, opts := testLog(t, Options{})
	if _, err := Open(t.Context(), opts); !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer without LockWait: %v, want ErrLocked", err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(100 * time.Millisecond)
		first.Close()
		close(released)
	}()
	waiting := opts
	waiting.LockWait = 10 * time.Second
	second, err := Open(t.Context(), waiting)
	if err != nil {
		t.Fatalf("second writer with LockWait: %v", err)
	}
	defer second.Close()
	select {
	case <-released:
	default:
		t.Fatal("the second writer got the lock while the first still held it")
	}
	appendN(t, second, 1, KindExecStart)
}

// TestConcurrentAppendFlush: appenders (canonical Object payloads and
// maps), explicit Flush and Checkpoint callers and the background writer
// (signing outside the append lock, double-buffered queue) all at once.
// Every entry is written exactly once, each worker's entries in its own
// order, and the log verifies. Run with -race.
func TestConcurrentAppendFlush(t *testing.T) {
	l, opts := testLog(t, Options{FlushEntries: 5, MaxPending: 40, CheckpointEvery: 17, FlushInterval: 200 * time.Microsecond})
	const workers, each = 6, 150
	ctx := context.Background()
	// Checkpoint needs one entry to sign.
	if _, err := l.Append(ctx, Entry{Kind: KindKernelStart, Actor: "kernel"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, workers+2)
	stop := make(chan struct{})
	for w := range workers {
		go func() {
			var o Object
			for i := range each {
				var p any
				if w%2 == 0 {
					o.Reset()
					o.Int("i", int64(i))
					o.Int("w", int64(w))
					p = &o
				} else {
					p = map[string]int{"w": w, "i": i}
				}
				if _, err := l.Append(ctx, Entry{Kind: "tool.read", Actor: "agent", Payload: p}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for _, f := range []func() error{
		func() error { return l.Flush(ctx) },
		func() error { _, err := l.Checkpoint(ctx); return err },
	} {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyDB(t, opts, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Size != workers*each+1 {
		t.Fatalf("size %d, want %d", rep.Size, workers*each+1)
	}
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := make([]int, workers)
	err = r.Entries(t.Context(), Filter{Kind: "tool.read"}, func(e Entry) error {
		var p struct{ W, I int }
		if err := json.Unmarshal(e.Payload.(json.RawMessage), &p); err != nil {
			return err
		}
		if p.I != next[p.W] {
			return fmt.Errorf("entry %d: worker %d entry %d, want %d", e.Seq, p.W, p.I, next[p.W])
		}
		next[p.W]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBufferedAppendDoesNotWaitForWriter: while the background writer is
// stuck in its transaction (another connection holds the write lock),
// buffered appends still return — they never wait for the disk — until
// MaxPending entries are unwritten; then Append waits (backpressure).
func TestBufferedAppendDoesNotWaitForWriter(t *testing.T) {
	l, opts := testLog(t, Options{FlushEntries: 5, MaxPending: 60, FlushInterval: time.Hour, BusyTimeout: time.Minute})
	ctx := context.Background()
	appendN(t, l, 1, KindKernelStart) // the database exists, the writer is idle
	other, err := sql.Open("sqlite", "file:"+opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	// Five entries wake the writer, which takes them and blocks on the lock.
	appendN(t, l, 5, KindExecStart)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		inflight := l.inflight
		l.mu.Unlock()
		if inflight > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never took the batch")
		}
		time.Sleep(time.Millisecond)
	}
	// Up to MaxPending unwritten entries: appends return with the lock
	// still held.
	done := make(chan error, 1)
	go func() {
		for range 60 - 5 {
			if _, err := l.Append(ctx, Entry{Kind: KindExecStart, Actor: "agent"}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("buffered appends waited for the blocked writer")
	}
	// One more reaches MaxPending: it waits for the writer.
	blocked := make(chan error, 1)
	go func() {
		_, err := l.Append(ctx, Entry{Kind: KindExecStart, Actor: "agent"})
		blocked <- err
	}()
	select {
	case err := <-blocked:
		t.Fatalf("append past MaxPending returned while the writer was blocked: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyDB(t, opts, true)
	if err != nil || rep.Size != 62 {
		t.Fatalf("verify: %+v, %v; want 62 entries", rep, err)
	}
}
