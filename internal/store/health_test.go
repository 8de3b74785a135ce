package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func openTable(t *testing.T) *DB {
	t.Helper()
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func insertRows(ctx context.Context, db *DB, from, n int) error {
	for i := from; i < from+n; i++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (id, v) VALUES (?, ?)`, i, strings.Repeat("x", 1000)); err != nil {
			return err
		}
	}
	return nil
}

// The WAL shrinks once it is past the policy's size, and an idle WAL is
// copied into the database (passive) without being emptied.
func TestCheckpointWAL(t *testing.T) {
	ctx := t.Context()
	db := openTable(t)
	if err := insertRows(ctx, db, 1, 600); err != nil {
		t.Fatal(err)
	}
	walSize := func() int64 {
		fi, err := os.Stat(db.Path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := walSize()
	p := WALPolicy{TruncateBytes: 256 << 10}
	if before <= p.TruncateBytes {
		t.Fatalf("the WAL is %d bytes, the test needs more than %d", before, p.TruncateBytes)
	}
	mode, after, err := db.CheckpointWAL(ctx, p, -1)
	if err != nil {
		t.Fatal(err)
	}
	if mode != WALTruncate || after != 0 || walSize() != 0 {
		t.Errorf("past the limit: checkpoint %q, WAL %d bytes (file %d), want TRUNCATE and 0", mode, after, walSize())
	}
	// A small WAL still being written is left alone; once it stops
	// changing it is copied in.
	if err := insertRows(ctx, db, 1000, 5); err != nil {
		t.Fatal(err)
	}
	mode, size, err := db.CheckpointWAL(ctx, p, 0)
	if err != nil || mode != WALNone {
		t.Fatalf("busy small WAL: checkpoint %q, %v; want none", mode, err)
	}
	mode, _, err = db.CheckpointWAL(ctx, p, size)
	if err != nil || mode != WALPassive {
		t.Fatalf("idle small WAL: checkpoint %q, %v; want PASSIVE", mode, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 605 {
		t.Fatalf("rows after checkpoints: %d, %v", n, err)
	}
}

// A copy taken while another connection writes opens, passes
// integrity_check, and holds a prefix of the writes: rows 1..k, none
// missing before the last.
func TestVacuumIntoUnderWriter(t *testing.T) {
	ctx := t.Context()
	db := openTable(t)
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := insertRows(context.WithoutCancel(ctx), db, i, 1); err != nil {
				t.Error(err)
				return
			}
			written.Store(int64(i))
		}
	}()
	for written.Load() < 50 {
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	dest := filepath.Join(t.TempDir(), "copy.db")
	err := db.VacuumInto(ctx, dest)
	w := written.Load()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := IntegrityCheck(ctx, dest); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCopy(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n, hi int64
	if err := c.QueryRowContext(ctx, `SELECT count(*), coalesce(max(id), 0) FROM t`).Scan(&n, &hi); err != nil {
		t.Fatal(err)
	}
	if n == 0 || n != hi || hi > w+1 {
		t.Errorf("copy holds %d rows up to %d (writer had confirmed %d): want a prefix 1..k", n, hi, w)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode: %v %v", fi, err)
	}
}

// A file whose pages were overwritten, or that was truncated, fails
// quick_check with a CorruptError; an intact one passes.
func TestQuickCheckDamage(t *testing.T) {
	ctx := t.Context()
	db := openTable(t)
	if err := insertRows(ctx, db, 1, 300); err != nil {
		t.Fatal(err)
	}
	path := db.Path
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := QuickCheck(ctx, path); err != nil {
		t.Fatalf("intact: %v", err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func([]byte) []byte{
		"overwritten pages": func(b []byte) []byte {
			b = append([]byte(nil), b...)
			for i := 4096 * 2; i < 4096*6 && i < len(b); i++ {
				b[i] = 0xA5
			}
			return b
		},
		"truncated": func(b []byte) []byte { return b[:len(b)/3] },
		"header":    func(b []byte) []byte { b = append([]byte(nil), b...); copy(b, "not a database!!"); return b },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "d.db")
			if err := os.WriteFile(p, damage(orig), 0o600); err != nil {
				t.Fatal(err)
			}
			err := QuickCheck(ctx, p)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Path != p {
				t.Fatalf("QuickCheck = %v, want a CorruptError", err)
			}
		})
	}
	if err := QuickCheck(ctx, filepath.Join(t.TempDir(), "none.db")); err != nil {
		t.Errorf("missing file: %v", err)
	}
}
