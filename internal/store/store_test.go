package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestOpenSettings(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data")
	db, err := OpenMain(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "5000", "synchronous": "2"} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "fluffy.db"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	ms, err := LoadMigrations(MainMigrations())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := db.Version(ctx); v != len(ms) || v == 0 {
		t.Errorf("version = %d, want %d", v, len(ms))
	}
	// Foreign keys are enforced, not just declared.
	if _, err := db.ExecContext(ctx, "CREATE TABLE p(id INTEGER PRIMARY KEY); CREATE TABLE c(p INTEGER REFERENCES p(id))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO c VALUES (42)"); err == nil {
		t.Error("foreign key violation accepted")
	}
}

// subset returns an FS with the first n migrations of full.
func subset(t *testing.T, full []Migration, n int) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	for _, mig := range full[:n] {
		m[mig.Name] = &fstest.MapFile{Data: []byte(mig.SQL)}
	}
	return m
}

// TestUpgradeFromEveryVersion opens a database left at each earlier schema
// version with the current binary, and checks it ends with exactly the
// schema of a fresh database.
func TestUpgradeFromEveryVersion(t *testing.T) {
	ctx := t.Context()
	full, err := LoadMigrations(MainMigrations())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, filepath.Join(t.TempDir(), "fresh.db"), Options{Migrations: MainMigrations()})
	if err != nil {
		t.Fatal(err)
	}
	want, err := fresh.Schema(ctx)
	fresh.Close()
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < len(full); from++ {
		t.Run(fmt.Sprintf("from_%d", from), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "old.db")
			old, err := Open(ctx, p, Options{Migrations: subset(t, full, from)})
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := old.Version(ctx); v != from {
				t.Fatalf("old version = %d, want %d", v, from)
			}
			old.Close()
			db, err := Open(ctx, p, Options{Migrations: MainMigrations()})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			got, err := db.Schema(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("schema after upgrade from %d differs from fresh (-fresh +upgraded):\n%s", from, d)
			}
		})
	}
}

func TestRefusesNewerDatabase(t *testing.T) {
	ctx := t.Context()
	p := filepath.Join(t.TempDir(), "new.db")
	db, err := OpenMain(ctx, filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	p = db.Path
	if _, err := db.ExecContext(ctx, "PRAGMA user_version = 999; INSERT INTO meta VALUES ('k', 'v')"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = OpenMain(ctx, filepath.Dir(p))
	if !errors.Is(err, ErrTooNew) {
		t.Fatalf("err = %v, want ErrTooNew", err)
	}
	if !strings.Contains(err.Error(), "version 999") || !strings.Contains(err.Error(), p) {
		t.Errorf("error should name the file and version: %v", err)
	}
	// Nothing was changed by the refused open.
	raw, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var v int
	var val string
	if err := raw.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 999 {
		t.Errorf("user_version = %d, %v", v, err)
	}
	if err := raw.QueryRow("SELECT value FROM meta WHERE key='k'").Scan(&val); err != nil || val != "v" {
		t.Errorf("data lost: %q, %v", val, err)
	}
}

func TestFailedMigrationRollsBack(t *testing.T) {
	ctx := t.Context()
	p := filepath.Join(t.TempDir(), "x.db")
	good := fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a(x);")}}
	db, err := Open(ctx, p, Options{Migrations: good})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	bad := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a(x);")},
		"0002_b.sql": {Data: []byte("CREATE TABLE b(y);")},
		"0003_c.sql": {Data: []byte("CREATE TABLE c(z); THIS IS NOT SQL;")},
	}
	_, err = Open(ctx, p, Options{Migrations: bad})
	if err == nil || !strings.Contains(err.Error(), "0003_c.sql") {
		t.Fatalf("err = %v, want one naming 0003_c.sql", err)
	}
	db, err = Open(ctx, p, Options{Migrations: good})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, _ := db.Version(ctx); v != 1 {
		t.Errorf("version after failed migration = %d, want 1", v)
	}
	s, _ := db.Schema(ctx)
	if strings.Contains(strings.Join(s, "\n"), "TABLE b") {
		t.Errorf("migration 0002 was applied although 0003 failed: %v", s)
	}
}

func TestLoadMigrationsRejectsBadSets(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"0001_a.sql": {}, "0003_c.sql": {}},
		"duplicate": {"0001_a.sql": {}, "0001_b.sql": {}},
		"bad name":  {"first.sql": {}},
		"zero":      {"0000_a.sql": {}},
	} {
		if _, err := LoadMigrations(fsys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ms, err := LoadMigrations(fstest.MapFS{"0002_b.sql": {}, "0001_a.sql": {}, "README": {}})
	if err != nil || len(ms) != 2 || ms[0].Version != 1 {
		t.Errorf("ordering: %v, %v", ms, err)
	}
}

// TestConcurrentOpen has 16 connections migrate a fresh database at once,
// as fluffy processes starting together would (the CLI, the kernel). It
// failed about once in 40 runs (`-count=40`) with SQLITE_BUSY before
// Open retried a busy first connection (pingBusy).
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := OpenMain(ctx, dir)
			if err != nil {
				errs <- err
				return
			}
			_, err = db.ExecContext(ctx, "INSERT OR REPLACE INTO meta VALUES ('k', 'v')")
			db.Close()
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
