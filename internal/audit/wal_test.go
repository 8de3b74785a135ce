package audit

import (
	"database/sql"
	"errors"
	"os"
	"testing"
	"time"
)

func walSize(t *testing.T, opts Options) int64 {
	t.Helper()
	fi, err := os.Stat(opts.Path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestKeepWAL checks that Close with KeepWAL leaves the WAL (no
// checkpoint into audit.db), that the next Open continues from it, that
// Open checkpoints a WAL past its limit, and that readers see
// everything.
func TestKeepWAL(t *testing.T) {
	l, opts := testLog(t, Options{KeepWAL: true})
	appendN(t, l, 5, KindExecStart)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	kept := walSize(t, opts)
	if kept <= 0 {
		t.Fatalf("WAL after a KeepWAL close: %d bytes, want it kept", kept)
	}
	if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 5 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	// The reader's close (without KeepWAL) checkpointed and removed it.
	if n := walSize(t, opts); n != -1 && n != 0 {
		t.Logf("WAL after a reader closed: %d bytes", n)
	}
	for round := 0; round < 3; round++ {
		l, err := Open(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 5, KindExecStart)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			kept = walSize(t, opts)
		}
	}
	grown := walSize(t, opts)
	if grown <= kept {
		t.Fatalf("WAL did not grow across KeepWAL runs: %d then %d bytes", kept, grown)
	}
	// Past the limit, Open copies the WAL into audit.db first.
	o := opts
	o.walLimit = grown / 2
	l2, err := Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if n := walSize(t, opts); n != 0 {
		t.Fatalf("WAL after Open past the limit: %d bytes, want 0 (copied and truncated)", n)
	}
	// The connection that checkpointed went back to the pool with the
	// busy timeout it had.
	var busy int
	if err := l2.db.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 5000 {
		t.Fatalf("busy timeout after the checkpoint: %d, %v", busy, err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything is in audit.db now: without the WAL, nothing is missing.
	if err := os.Remove(opts.Path + "-wal"); err != nil {
		t.Fatal(err)
	}
	os.Remove(opts.Path + "-shm")
	if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 20 {
		t.Fatalf("verify without the WAL after Open copied it: %+v, %v", rep, err)
	}
	l3, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l3, 1, KindGatePolicy)
	if err := l3.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 21 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestWALCheckpointDoesNotWaitForReaders: the copy of a large WAL at Open
// must not wait for a reader holding an old snapshot (`fluffy audit tail
// -f`); it copies what it can and the writer goes on.
func TestWALCheckpointDoesNotWaitForReaders(t *testing.T) {
	l, opts := testLog(t, Options{KeepWAL: true})
	appendN(t, l, 5, KindGatePolicy)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if _, err := conn.ExecContext(t.Context(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(t.Context(), "SELECT count(*) FROM entries").Scan(&n); err != nil || n != 5 {
		t.Fatalf("reader: %d, %v", n, err)
	}
	o := opts
	o.walLimit, o.BusyTimeout = 1, time.Minute
	done := make(chan error, 1)
	go func() {
		l, err := Open(t.Context(), o)
		if err == nil {
			if _, err = l.Append(t.Context(), Entry{Kind: KindGatePolicy, Actor: "agent"}); err != nil {
				l.Close()
			} else {
				err = l.Close()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open waited for a reader to copy the WAL")
	}
	conn.ExecContext(t.Context(), "ROLLBACK")
	if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 6 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestKeepWALLost deletes the WAL a KeepWAL close left (a backup that
// copied audit.db alone, an edit): the checkpoint file under keys/ covers
// the lost entries, so Open refuses to write and Verify reports the
// truncation.
func TestKeepWALLost(t *testing.T) {
	l, opts := testLog(t, Options{KeepWAL: true})
	appendN(t, l, 5, KindGatePolicy)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(opts.Path + "-wal"); err != nil {
		t.Fatal(err)
	}
	os.Remove(opts.Path + "-shm")
	_, err := Open(t.Context(), opts)
	var de *DamageError
	if !errors.As(err, &de) || de.Damage != DamageTruncated {
		t.Fatalf("Open after the WAL was lost: %v", err)
	}
	if _, err := verifyDB(t, opts, true); !errors.As(err, &de) || de.Damage != DamageTruncated {
		t.Fatalf("verify after the WAL was lost: %v", err)
	}
}

func TestNoCheckpointOnCloseOtherDrivers(t *testing.T) {
	type conn struct{ db uintptr }
	for _, dc := range []any{nil, struct{}{}, &struct{}{}, &conn{db: 1}, (*conn)(nil)} {
		if err := noCheckpointOnClose(dc); !errors.Is(err, errNoDBConfig) {
			t.Errorf("%T: %v, want errNoDBConfig", dc, err)
		}
	}
}
