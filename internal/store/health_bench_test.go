package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchDB makes a database of about mib MiB (rows of 4000 bytes) and
// returns its path, its WAL folded in.
func benchDB(b *testing.B, mib int) string {
	b.Helper()
	ctx := b.Context()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	row := strings.Repeat("x", 4000)
	for range mib << 20 / 4096 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (v) VALUES (?)`, row); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	return db.Path
}

// BenchmarkQuickCheck is the check every kernel start runs on fluffy.db,
// here on 64 MiB.
func BenchmarkQuickCheck(b *testing.B) {
	p := benchDB(b, 64)
	for b.Loop() {
		if err := QuickCheck(b.Context(), p); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(64 << 20)
}

// BenchmarkVacuumInto is a backup's copy of a 64 MiB database.
func BenchmarkVacuumInto(b *testing.B) {
	p := benchDB(b, 64)
	db, err := Open(b.Context(), p, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	dest := filepath.Join(b.TempDir(), "copy.db")
	for b.Loop() {
		_ = os.Remove(dest)
		if err := db.VacuumInto(b.Context(), dest); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(64 << 20)
}
