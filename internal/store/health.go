package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// ErrCorrupt is matched (errors.Is) by every *CorruptError.
var ErrCorrupt = errors.New("database is damaged")

// CorruptError says a database file failed SQLite's own check, or is not a
// database at all (overwritten pages, a truncated file).
type CorruptError struct {
	Path string
	// Detail is what SQLite reported: the first lines of quick_check,
	// or the error that stopped the file from opening.
	Detail string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s is damaged: %s", e.Path, e.Detail)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// SQLite's primary result codes for a damaged file.
const (
	sqliteCorrupt = 11 // SQLITE_CORRUPT
	sqliteNotADB  = 26 // SQLITE_NOTADB
)

// isCorruption reports whether err is SQLite saying the file is damaged
// or no database.
func isCorruption(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqliteCorrupt || c == sqliteNotADB
}

// QuickCheck runs PRAGMA quick_check on the database file at path without
// writing to it (nor migrating it). A missing file passes (nothing to
// check); a damaged one gives a *CorruptError; any other failure (the file
// unreadable, locked past the busy timeout) is returned as it is.
//
// quick_check reads every page and checks the b-trees' structure, but not
// that indexes match their tables (integrity_check does): it is the
// cheaper of the two, the one for every start.
func QuickCheck(ctx context.Context, path string) error {
	return check(ctx, path, "quick_check", false)
}

// IntegrityCheck runs PRAGMA integrity_check on a database file that no
// process writes (a backup copy): opened immutable, read-only.
func IntegrityCheck(ctx context.Context, path string) error {
	return check(ctx, path, "integrity_check", true)
}

func check(ctx context.Context, path, pragma string, immutable bool) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := openRead(path, immutable)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA "+pragma+"(20)")
	if err != nil {
		if isCorruption(err) {
			return &CorruptError{Path: path, Detail: err.Error()}
		}
		return fmt.Errorf("store: %s %s: %w", pragma, path, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			if isCorruption(err) {
				return &CorruptError{Path: path, Detail: err.Error()}
			}
			return fmt.Errorf("store: %s %s: %w", pragma, path, err)
		}
		lines = append(lines, s)
	}
	if err := rows.Err(); err != nil {
		if isCorruption(err) {
			return &CorruptError{Path: path, Detail: err.Error()}
		}
		return fmt.Errorf("store: %s %s: %w", pragma, path, err)
	}
	if len(lines) == 1 && lines[0] == "ok" {
		return nil
	}
	if len(lines) > 3 {
		lines = append(lines[:3], fmt.Sprintf("(%d more)", len(lines)-3))
	}
	return &CorruptError{Path: path, Detail: strings.Join(lines, "; ")}
}

// openRead opens path read-only: no migration, no change of journal mode.
// immutable tells SQLite that nobody writes the file (a backup copy): it
// takes no locks and reads no WAL.
func openRead(path string, immutable bool) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	} else {
		q.Add("_pragma", "busy_timeout(5000)")
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return db, nil
}

// OpenCopy opens a database file no process writes (a backup copy)
// read-only and immutable, so reading it changes none of its bytes.
func OpenCopy(path string) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := openRead(path, true)
	if err != nil {
		return nil, err
	}
	return &DB{DB: db, Path: path}, nil
}

// VacuumInto writes a consistent copy of the database to dest (which must
// not exist), as of one read transaction: writers go on meanwhile, and
// the copy holds exactly the transactions committed before it began. The
// copy is a single file in rollback-journal mode, compacted, and synced
// before VacuumInto returns.
func (db *DB) VacuumInto(ctx context.Context, dest string) error {
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dest); err != nil {
		return fmt.Errorf("store: copy %s to %s: %w", db.Path, dest, err)
	}
	f, err := os.OpenFile(dest, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: sync %s: %w", dest, err)
	}
	return nil
}

// WALPolicy says when CheckpointWAL copies the write-ahead log into the
// database: like the audit log's (docs/audit.md), a PASSIVE checkpoint
// when the database has been idle (no commit since the last look), and a
// TRUNCATE checkpoint, which also empties the WAL file, once it has grown
// past TruncateBytes. SQLite's own automatic checkpoint (every 1,000
// pages) copies but never shrinks the file, so without the second rule a
// burst of writes leaves a large WAL that every open must read.
type WALPolicy struct {
	// TruncateBytes is the WAL size past which it is truncated. Default
	// 4 MiB.
	TruncateBytes int64
	// Interval is how often RunWALCheckpoints looks. Default 30s.
	Interval time.Duration
}

func (p *WALPolicy) defaults() {
	if p.TruncateBytes <= 0 {
		p.TruncateBytes = 4 << 20
	}
	if p.Interval <= 0 {
		p.Interval = 30 * time.Second
	}
}

// WALMode is the checkpoint CheckpointWAL ran.
type WALMode string

// The checkpoints.
const (
	WALNone     WALMode = ""
	WALPassive  WALMode = "PASSIVE"
	WALTruncate WALMode = "TRUNCATE"
)

// CheckpointWAL applies p once: it returns the checkpoint it ran (none
// when the WAL is small and was written to since lastSize, the WAL's size
// at the previous look) and the WAL's size now, for the next call.
//
// Both checkpoints run on a connection whose busy timeout is 0: they
// copy what no reader still needs and never wait, so a long reader delays
// only the shrinking, never a writer.
func (db *DB) CheckpointWAL(ctx context.Context, p WALPolicy, lastSize int64) (WALMode, int64, error) {
	p.defaults()
	fi, err := os.Stat(db.Path + "-wal")
	if errors.Is(err, fs.ErrNotExist) {
		return WALNone, 0, nil
	}
	if err != nil {
		return WALNone, lastSize, fmt.Errorf("store: %w", err)
	}
	size := fi.Size()
	mode := WALNone
	switch {
	case size > p.TruncateBytes:
		mode = WALTruncate
	case size > 0 && size == lastSize:
		mode = WALPassive
	default:
		return WALNone, size, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return WALNone, size, fmt.Errorf("store: checkpoint %s: %w", db.Path, err)
	}
	defer conn.Close()
	var busy int
	if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
		return WALNone, size, fmt.Errorf("store: checkpoint %s: %w", db.Path, err)
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return WALNone, size, fmt.Errorf("store: checkpoint %s: %w", db.Path, err)
	}
	var blocked, logFrames, done int
	cerr := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(`+string(mode)+`)`).Scan(&blocked, &logFrames, &done)
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busy)); err != nil {
		// Never back to the pool without its timeout.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return mode, size, fmt.Errorf("store: restore the busy timeout on %s: %w", db.Path, err)
	}
	if cerr != nil {
		return mode, size, fmt.Errorf("store: checkpoint %s (%s): %w", db.Path, mode, cerr)
	}
	if fi, err := os.Stat(db.Path + "-wal"); err == nil {
		size = fi.Size()
	}
	return mode, size, nil
}

// RunWALCheckpoints applies p every p.Interval until ctx ends. Failures
// are passed to warn (nil: ignored): the WAL is durable either way, and
// the next look tries again.
func (db *DB) RunWALCheckpoints(ctx context.Context, p WALPolicy, warn func(error)) {
	p.defaults()
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	var last int64 = -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if _, last, err = db.CheckpointWAL(ctx, p, last); err != nil && warn != nil && ctx.Err() == nil {
			warn(err)
		}
	}
}
