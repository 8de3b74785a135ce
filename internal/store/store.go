// Package store owns fluffy's SQLite databases: opening them with the
// settings every caller needs (WAL, busy timeout, foreign keys, immediate
// write transactions), forward-only embedded migrations, and the schema
// version check that refuses a database written by a newer fluffy.
//
// The driver is modernc.org/sqlite, a pure-Go translation of SQLite. It was
// chosen over the cgo driver (mattn/go-sqlite3) because fluffy ships as one
// static binary built with CGO_ENABLED=0 (no C toolchain for users or CI,
// trivial cross-compiles), and because it includes FTS5, which memory search
// needs. The cost is speed: inserts are about 1.45× slower than cgo SQLite;
// the audit log batches its writes so this stays far from the hot path.
//
// The main database (fluffy.db) uses the migrations in migrations/; other
// packages that own a database file of their own (the audit log's audit.db)
// call Open with their own migration set.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver
)

//go:embed migrations/*.sql
var mainMigrations embed.FS

// MainMigrations returns the migrations of fluffy.db.
func MainMigrations() fs.FS {
	// fs.Sub fails only for an invalid path; "migrations" is a constant.
	sub, _ := fs.Sub(mainMigrations, "migrations")
	return sub
}

// ErrTooNew is returned when a database's schema is newer than this binary
// knows: opening it could corrupt data a newer fluffy relies on.
var ErrTooNew = errors.New("database schema is newer than this fluffy")

// Options tunes Open. The zero value is usable but applies no migrations.
type Options struct {
	// Migrations holds files named NNNN_description.sql, numbered from
	// 0001 without gaps. Nil means the schema is managed elsewhere.
	Migrations fs.FS
	// BusyTimeout is how long a statement waits for a lock held by
	// another connection or process. Default 5s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous pragma: "FULL" (default; a
	// committed transaction survives power loss) or "NORMAL" (survives a
	// process crash only, faster).
	Synchronous string
}

// DB is an open database.
type DB struct {
	*sql.DB
	Path string
}

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Open opens (creating if needed) the SQLite database at path, with its
// parent directory created 0700, and applies pending migrations in a single
// transaction. On any error nothing is left open and the schema is
// unchanged.
func Open(ctx context.Context, file string, opts Options) (*DB, error) {
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.Synchronous == "" {
		opts.Synchronous = "FULL"
	}
	if opts.Synchronous != "FULL" && opts.Synchronous != "NORMAL" {
		return nil, fmt.Errorf("store: synchronous must be FULL or NORMAL, not %q", opts.Synchronous)
	}
	var migrations []Migration
	if opts.Migrations != nil {
		var err error
		if migrations, err = LoadMigrations(opts.Migrations); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory for %s: %w", file, err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous("+opts.Synchronous+")")
	q.Set("_txlock", "immediate")
	sqldb, err := sql.Open("sqlite", "file:"+file+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", file, err)
	}
	db := &DB{DB: sqldb, Path: file}
	if err := pingBusy(ctx, db, opts.BusyTimeout); err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("store: open %s: %w", file, err)
	}
	// The file may have been created just now with the process umask.
	if err := os.Chmod(file, 0o600); err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := db.migrate(ctx, migrations); err != nil {
		sqldb.Close()
		return nil, err
	}
	return db, nil
}

// OpenMain opens fluffy.db in the data directory home.
func OpenMain(ctx context.Context, home string) (*DB, error) {
	return Open(ctx, filepath.Join(home, "fluffy.db"), Options{Migrations: MainMigrations()})
}

// LoadMigrations reads and checks a migration set: names NNNN_name.sql,
// versions 1..N without gaps or duplicates.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("store: migration %q: name must be NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("store: read migration %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("store: migration %s: expected version %d (versions must run 1..N without gaps or duplicates)", m.Name, i+1)
		}
	}
	return ms, nil
}

// Version returns the schema version (SQLite's user_version).
func (db *DB) Version(ctx context.Context) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("store: read schema version of %s: %w", db.Path, err)
	}
	return v, nil
}

func (db *DB) migrate(ctx context.Context, ms []Migration) error {
	latest := len(ms)
	// BEGIN IMMEDIATE (the _txlock setting) takes the write lock first,
	// so two processes opening a fresh database migrate one after the
	// other, and the second sees the first's version.
	return db.Tx(ctx, func(tx *sql.Tx) error {
		var cur int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
			return fmt.Errorf("store: read schema version of %s: %w", db.Path, err)
		}
		if cur > latest && latest > 0 {
			return fmt.Errorf("%w: %s is at version %d, this binary knows up to %d; upgrade fluffy or restore a backup", ErrTooNew, db.Path, cur, latest)
		}
		for _, m := range ms[min(cur, latest):] {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("store: migration %s on %s: %w", m.Name, db.Path, err)
			}
		}
		if cur < latest {
			// PRAGMA takes no parameters; latest is an int we computed.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", latest)); err != nil {
				return fmt.Errorf("store: set schema version of %s: %w", db.Path, err)
			}
		}
		return nil
	})
}

// Tx runs fn in a write transaction (BEGIN IMMEDIATE), committing when it
// returns nil and rolling back otherwise.
func (db *DB) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin on %s: %w", db.Path, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit on %s: %w", db.Path, err)
	}
	return nil
}

// Schema returns the schema's SQL text (tables, indexes, triggers, views),
// sorted, for comparisons in tests and `fluffy doctor`.
func (db *DB) Schema(ctx context.Context) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
	if err != nil {
		return nil, fmt.Errorf("store: read schema of %s: %w", db.Path, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// pingBusy opens the first connection, retrying for up to wait while
// the file is busy: SQLite does not call its busy handler for every lock
// a fresh connection takes (switching a new file to WAL, or reading the
// WAL index while another process recovers it), so processes starting
// together could fail with SQLITE_BUSY despite busy_timeout.
func pingBusy(ctx context.Context, db *DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := db.PingContext(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqliteBusy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// sqliteBusy is SQLITE_BUSY, the primary result code (extended codes
// such as SQLITE_BUSY_RECOVERY carry it in their low byte).
const sqliteBusy = 5
