package audit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"time"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The write-ahead log across processes.
//
// SQLite's last connection to a database checkpoints the WAL into the
// database file and deletes it when it closes. For a short-lived writer
// (one `fluffy sandbox run`) that costs two fsyncs after its last commit
// (the WAL again, then the database) on the command's critical path, and
// the next process recreates the WAL: a header fsync and a directory fsync
// before its first commit. So Close leaves the WAL as it is (it is
// durable: every commit synced it), and Open checkpoints it, before its
// first write, once it has grown past walCheckpointBytes: work that runs
// while the sandbox is being set up, and that keeps the WAL, which every
// open must read to rebuild its index, small.

// walCheckpointBytes is the WAL size past which Open checkpoints it: about
// 9 `fluffy sandbox run`s (each adds 5-7 pages). Opening reads the whole
// WAL (about 2.5 µs a page), checkpointing costs three fsyncs. (A
// long-lived writer also has SQLite's own automatic checkpoint at 1,000
// pages.)
const walCheckpointBytes = 256 << 10

// errNoDBConfig means the SQLite driver does not expose what
// keepWALOnClose needs; the log works, closing just checkpoints.
var errNoDBConfig = errors.New("the sqlite driver's connection has no db/tls fields")

// noCheckpointOnClose sets SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE on the driver
// connection dc (a modernc.org/sqlite connection). database/sql offers no
// way to call sqlite3_db_config, so the connection's handle is read
// through reflection; any other driver, or a version whose connection
// lacks the fields, gives errNoDBConfig.
func noCheckpointOnClose(dc any) error {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return errNoDBConfig
	}
	s := v.Elem()
	h, t := s.FieldByName("db"), s.FieldByName("tls")
	if !h.IsValid() || h.Kind() != reflect.Uintptr || h.Uint() == 0 ||
		!t.IsValid() || t.Type() != reflect.TypeFor[*libc.TLS]() || t.IsNil() {
		return errNoDBConfig
	}
	tls := (*libc.TLS)(t.UnsafePointer())
	// sqlite3_db_config(db, op, int onoff, int *pRes): varargs are 8-byte
	// slots in modernc's libc.
	bp := tls.Alloc(16)
	defer tls.Free(16)
	if rc := sqlite3.Xsqlite3_db_config(tls, uintptr(h.Uint()), sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, libc.VaList(bp, int32(1), uintptr(0))); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("sqlite3_db_config(NO_CKPT_ON_CLOSE): rc %d", rc)
	}
	return nil
}

// closeKeepingWAL closes db without checkpointing its WAL. SQLite
// checkpoints when the last connection to the database file closes, so
// one connection, told not to, is held (with a read, so it holds its
// shared lock on the file) while the pool closes, and closed last. It
// returns whether the WAL was kept; when the driver does not allow it the
// database is closed normally.
func closeKeepingWAL(db *sql.DB) (kept bool, err error) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, db.Close()
	}
	if err := conn.Raw(noCheckpointOnClose); err == nil {
		kept = true
		// Any read takes the shared lock, which a WAL-mode connection
		// keeps until it closes.
		var one int
		_ = conn.QueryRowContext(ctx, `SELECT 1 FROM meta LIMIT 1`).Scan(&one)
	}
	err = db.Close()
	if cerr := conn.Close(); err == nil && !errors.Is(cerr, sql.ErrConnDone) {
		err = cerr
	}
	return kept, err
}

// walCheckpoint copies the WAL into the database and empties it when it
// has grown past limit bytes, so the next opener has little to read. A
// failure is not an error for the caller: the WAL is durable either way.
//
// TRUNCATE, on a connection whose busy timeout is 0 for the occasion: it
// copies what no reader still needs and never waits (with a timeout, it
// would wait for readers on an older snapshot, and a `fluffy audit tail
// -f` must not delay a sandboxed command); when nothing holds it back it
// also truncates the file, whose size is what the next Open looks at.
func walCheckpoint(ctx context.Context, db *sql.DB, walSize, limit int64, busy time.Duration) error {
	if walSize < limit {
		return nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("audit: checkpoint the WAL: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return fmt.Errorf("audit: checkpoint the WAL: %w", err)
	}
	var blocked, logFrames, done int
	err = conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&blocked, &logFrames, &done)
	// Back to the pool's setting whatever happened.
	if _, rerr := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busy.Milliseconds())); rerr != nil {
		// The connection must not go back to the pool without its
		// timeout: close it for good.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return fmt.Errorf("audit: restore the busy timeout: %w", rerr)
	}
	if err != nil {
		return fmt.Errorf("audit: checkpoint the WAL: %w", err)
	}
	return nil
}
