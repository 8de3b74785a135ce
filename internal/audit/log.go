package audit

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/transparency-dev/merkle/compact"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema migrations of audit.db.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrationFiles, "migrations")
	return sub
}

// Errors callers branch on.
var (
	// ErrUnavailable is wrapped by every Append error caused by the log
	// being unwritable (disk full, database locked too long, I/O error):
	// the entry was not recorded and the action it describes must not
	// proceed.
	ErrUnavailable = errors.New("audit log unavailable")
	// ErrLocked is returned by Open when another process has the log open
	// for writing.
	ErrLocked = errors.New("audit log is open for writing by another process")
	// ErrForeignLog is returned when audit.db belongs to another key (its
	// origin is not the signing key's name).
	ErrForeignLog = errors.New("audit log belongs to another key")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("audit log closed")
	// ErrNoLog is returned when there is no audit.db to read.
	ErrNoLog = errors.New("no audit log")
)

// Options configures Open. Path and KeyDir are required.
type Options struct {
	// Path is the audit database file (datadir AuditDB).
	Path string
	// KeyDir holds the signing key and the copy of the newest checkpoint
	// (datadir Keys). The key is created there on first use.
	KeyDir string
	// FlushEntries: buffered entries are written once this many are
	// pending. Default 100.
	FlushEntries int
	// FlushInterval: buffered entries are written at least this often.
	// Default 500ms.
	FlushInterval time.Duration
	// MaxPending bounds the entries not yet on disk (queued, plus the
	// batch the background writer is writing): an Append that finds this
	// many waits for that write and writes the queue itself before
	// returning (backpressure), and fails if it cannot. It is the most a
	// crash can lose of buffered entries. Default max(8 × FlushEntries,
	// 10,000).
	MaxPending int
	// CheckpointEvery: a checkpoint is signed once this many entries were
	// written since the last one. Default 1000.
	CheckpointEvery int
	// CheckpointAfter: a checkpoint is signed when entries older than this
	// are not yet covered by one. Default 60s.
	CheckpointAfter time.Duration
	// BusyTimeout is how long a write waits for a lock held by another
	// connection (another process's reader checkpointing the WAL, a
	// sqlite3 shell) before failing. Default 5s.
	BusyTimeout time.Duration
	// WarnSize: Open logs a warning when the database is larger, or when
	// free disk runs low (see Stats.Warnings). 0 disables the size check.
	WarnSize int64
	// LockWait is how long Open waits for another process that holds the
	// writer's lock (a short-lived fluffy command appending its entries).
	// Zero fails at once with ErrLocked.
	LockWait time.Duration
	// OnLocked, when set, is called once if another process holds the
	// writer lock, with that process's pid (0 if unknown), before Open
	// waits for it: the caller may ask the holder to let go.
	OnLocked func(holder int)
	// KeepWAL makes Close leave SQLite's write-ahead log (audit.db-wal)
	// for the next opener instead of copying it into audit.db and
	// deleting it, which takes two more fsyncs then and two more at the
	// next writer's first commit. For short-lived writers whose Close is
	// on a critical path (`fluffy sandbox run` closes right after
	// exec.end). Every Open copies a WAL that has grown past 256 KiB
	// before its first write, so it stays small. Whoever copies audit.db
	// must copy audit.db-wal with it.
	KeepWAL bool
	// Logger receives warnings (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	// walLimit is the WAL size past which Open checkpoints it (default
	// walCheckpointBytes; tests lower it).
	walLimit int64
}

func (o *Options) defaults() {
	if o.FlushEntries <= 0 {
		o.FlushEntries = 100
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 500 * time.Millisecond
	}
	if o.MaxPending < o.FlushEntries {
		o.MaxPending = max(8*o.FlushEntries, 10_000)
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 1000
	}
	if o.CheckpointAfter <= 0 {
		o.CheckpointAfter = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.walLimit <= 0 {
		o.walLimit = walCheckpointBytes
	}
}

// Log is the audit log open for writing. One process at a time may hold
// it (a lock file beside the database enforces this). Its methods are
// safe for concurrent use.
//
// Ordering: entries get their sequence numbers in the order Append is
// called, and are written in that order; a synchronous entry is written
// together with every buffered entry before it, so a durable entry never
// follows a gap.
type Log struct {
	opts Options
	db   *store.DB
	key  Key
	lock *lockfile.Lock
	// witness is the checkpoint file under KeyDir, rewritten after every
	// commit (wmu held).
	witness *witness

	flushNow chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}

	// wmu serializes writes to the database, and guards the two fields
	// after it; taken before mu.
	wmu        sync.Mutex
	inserts    map[int]string // INSERT statements by entry count
	insertArgs []any          // their arguments, reused
	// prepared are the statements every commit runs, prepared at Open:
	// SQLite would parse their text at each execution, a good part of a
	// durable append's CPU.
	prepared struct{ insert1, head, checkpoint *sql.Stmt }
	// mu guards the fields below. It is never held during a write, except
	// by Prune.
	mu       sync.Mutex
	durable  uint64         // sequence number of the newest written entry
	size     uint64         // sequence number of the newest entry (written or pending)
	chain    []byte         // its chain hash
	rng      *compact.Range // compact Merkle range [0, size)
	pending  []row          // entries not yet written, in order
	spare    []row          // an empty array for the next queue, or nil
	inflight int            // entries of the batch being written
	chainer  *chainer       // Append's hash state
	cpSize   uint64         // tree size of the newest checkpoint
	cpTime   time.Time      // when it was made
	anchor   uint64
	closed   bool
}

// row is an entry as stored.
type row struct {
	seq  uint64
	body []byte
	hash []byte
}

// Open opens the log for writing, creating the database and the signing
// key when absent. It refuses a log signed by another key and a log
// another process has open; it does not verify the log (see Verify).
func Open(ctx context.Context, opts Options) (*Log, error) {
	opts.defaults()
	if opts.Path == "" || opts.KeyDir == "" {
		return nil, errors.New("audit: Options.Path and Options.KeyDir are required")
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	lock, err := lockFile(ctx, opts.Path+".lock", opts.LockWait, opts.OnLocked)
	if err != nil {
		return nil, err
	}
	l := &Log{opts: opts, lock: lock, flushNow: make(chan struct{}, 1), chainer: newChainer()}
	if err := l.open(ctx); err != nil {
		if l.db != nil {
			l.db.Close()
		}
		if l.witness != nil {
			l.witness.close()
		}
		lock.Release()
		return nil, err
	}
	// The size and free-disk warnings need no query.
	st := Stats{Path: opts.Path}
	if err := st.readDisk(); err == nil {
		for _, w := range st.Warnings(opts.WarnSize, 0) {
			opts.Logger.Warn("audit: " + w)
		}
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	go l.flusher(bg)
	return l, nil
}

func (l *Log) open(ctx context.Context) error {
	// The key and the checkpoint file are read while SQLite opens the
	// database (which takes most of Open's time).
	type keyFiles struct {
		key     Key
		w       *witness
		notes   []slotNote
		damaged int
		// verified is the checkpoint file's newest note, verified here
		// (zero if it did not verify): usually the same bytes as the
		// database's newest checkpoint, which then needs no second
		// verification. The first Ed25519 operations of a process are
		// slow (Go builds its base point tables lazily, about 2 ms), so
		// they run here, beside SQLite's open.
		verified Checkpoint
		err      error
	}
	kc := make(chan keyFiles, 1)
	go func() {
		var k keyFiles
		if k.key, k.err = LoadOrCreateKey(l.opts.KeyDir); k.err == nil {
			k.w, k.notes, k.damaged, k.err = openWitness(l.opts.KeyDir)
		}
		if k.err == nil && len(k.notes) > 0 {
			newest, size := k.notes[0].note, uint64(0)
			for _, n := range k.notes {
				if s, ok := noteSize(n.note); ok && s >= size {
					newest, size = n.note, s
				}
			}
			k.verified, _ = ParseCheckpoint(newest, k.key.Verifier)
		}
		kc <- k
	}()
	var err error
	l.db, err = store.Open(ctx, l.opts.Path, store.Options{Migrations: Migrations(), BusyTimeout: l.opts.BusyTimeout})
	kf := <-kc
	l.key, l.witness = kf.key, kf.w
	if err != nil {
		l.db = nil
		return fmt.Errorf("audit: %w", err)
	}
	if kf.err != nil {
		return kf.err
	}
	if fi, err := os.Stat(l.opts.Path + "-wal"); err == nil {
		if err := walCheckpoint(ctx, l.db.DB, fi.Size(), l.opts.walLimit, l.opts.BusyTimeout); err != nil {
			l.opts.Logger.Warn(err.Error())
		}
	}
	r := &Reader{db: l.db}
	st, err := r.resume(ctx)
	if err != nil {
		return err
	}
	if st.origin == "" {
		// A new log: it takes the key's name (a write transaction only
		// then).
		if err := l.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES ('origin', ?)`, l.key.Name())
			return err
		}); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		if st.origin, _, err = r.originAnchor(ctx); err != nil {
			return err
		}
	}
	if st.origin != l.key.Name() {
		return fmt.Errorf("%w: %s is the log %q, the key in %s is %q", ErrForeignLog, l.opts.Path, st.origin, l.opts.KeyDir, l.key.Name())
	}
	if err := l.prepare(ctx); err != nil {
		return err
	}
	l.anchor = st.anchor
	// Resume from the newest checkpoint: its compact range and chain hash,
	// then the entries after it.
	l.chain, l.rng, l.cpTime = zeroHash, rangeFactory.NewEmptyRange(0), l.opts.Now()
	cps := st.cps
	var signed uint64 // the newest signed size: head or periodic
	for i := len(cps) - 1; i >= 0; i-- {
		cp, err := kf.verified, error(nil)
		if cp.Note == nil || !bytes.Equal(cp.Note, cps[i].note) {
			cp, err = ParseCheckpoint(cps[i].note, l.key.Verifier)
		}
		if err != nil {
			return fmt.Errorf("audit: checkpoint at size %d in %s: %w (run 'fluffy audit verify')", cps[i].size, l.opts.Path, err)
		}
		signed = max(signed, cp.Size)
		if cps[i].rng == nil {
			continue // the head: no compact range to resume from
		}
		if cp.Size != cps[i].size {
			return fmt.Errorf("audit: checkpoint stored at size %d in %s says size %d (run 'fluffy audit verify')", cps[i].size, l.opts.Path, cp.Size)
		}
		if l.rng, err = newRange(cp.Size, cps[i].rng); err != nil {
			return err
		}
		l.size, l.chain, l.cpSize = cp.Size, cp.Chain, cp.Size
		break
	}
	for _, rw := range st.tail {
		if rw.seq != l.size+1 {
			return fmt.Errorf("audit: %s: entry %d follows %d (run 'fluffy audit verify')", l.opts.Path, rw.seq, l.size)
		}
		l.size, l.chain = rw.seq, rw.hash
		if err := l.rng.Append(leafHash(rw.hash), nil); err != nil {
			return err
		}
	}
	// Every write transaction signs the head, so entries beyond it were
	// not written by fluffy: refuse to adopt (and later sign) them.
	if l.size > signed {
		return fmt.Errorf("audit: refusing to write: %w", damage(signed+1, DamageUnsigned, "entries %d..%d in %s are covered by no signed checkpoint: they were added outside fluffy", signed+1, l.size, l.opts.Path))
	}
	l.durable = l.size
	// A database behind the checkpoint copy under keys/ lost entries (an
	// older copy put back, a lost WAL): continuing would overwrite that
	// evidence with a new chain, so refuse.
	wpath := filepath.Join(l.opts.KeyDir, CheckpointFile)
	notes, damaged := kf.notes, kf.damaged
	if len(notes) == 0 && damaged > 0 {
		return fmt.Errorf("audit: refusing to write: %s: %w (%d damaged slots): it was edited or the disk failed; run 'fluffy audit verify' with a checkpoint kept elsewhere, then move the file aside", wpath, ErrWitnessCorrupt, damaged)
	}
	if damaged > 0 {
		l.opts.Logger.Warn("audit: a slot of the checkpoint file is torn (a crash during its write); the other slot is used", "path", wpath)
	}
	for _, n := range notes {
		// A checkpoint at or below the database's size cannot reveal a
		// loss; Open does not verify (Verify does), so only one that
		// claims more is checked before it stops the writer.
		if size, ok := noteSize(n.note); ok && size <= l.size {
			continue
		}
		cp, err := ParseCheckpoint(n.note, l.key.Verifier)
		if err != nil {
			return fmt.Errorf("audit: %s: %w", wpath, err)
		}
		if cp.Size > l.size {
			return fmt.Errorf("audit: refusing to write: %w (move %s and %s aside to start a new log)",
				damage(l.size+1, DamageTruncated, "%s ends at %d but the checkpoint kept in %s covers %d entries", l.opts.Path, l.size, l.opts.KeyDir, cp.Size),
				l.opts.Path, wpath)
		}
	}
	return nil
}

func openDB(ctx context.Context, path string) (*store.DB, error) {
	db, err := store.Open(ctx, path, store.Options{Migrations: Migrations()})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return db, nil
}

// lockFile takes the writer's lock on path, waiting up to wait for a
// holder to let go, and writes our pid into it. The lock dies with the
// process, so a kill -9 never leaves a stale lock.
func lockFile(ctx context.Context, path string, wait time.Duration, onLocked func(int)) (*lockfile.Lock, error) {
	lock, err := lockfile.Acquire(ctx, path, lockfile.Options{Wait: wait, WritePID: true, OnBusy: onLocked})
	var busy *lockfile.BusyError
	switch {
	case errors.As(err, &busy) && busy.PID > 0:
		return nil, fmt.Errorf("%w (pid %d holds %s)", ErrLocked, busy.PID, path)
	case busy != nil:
		return nil, fmt.Errorf("%w (another process holds %s)", ErrLocked, path)
	case err != nil:
		return nil, fmt.Errorf("audit: lock: %w", err)
	}
	return lock, nil
}

// Key returns the signing key's public half and name.
func (l *Log) Key() Key { return l.key }

// Pending is how many appended entries are not yet on disk: queued, or
// in the write under way. Appends wait once it reaches MaxPending.
func (l *Log) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) + l.inflight
}

// Reader returns a reader over the same database.
func (l *Log) Reader() *Reader { return &Reader{db: l.db, path: l.opts.Path} }

// Append records e and returns its sequence number. Synchronous kinds
// (Kind.Synchronous) are durable on disk when Append returns nil, together
// with every entry appended before them (group commit). Other kinds are
// queued and written within FlushInterval or once FlushEntries are
// pending. When MaxPending entries are queued, Append first writes the
// queue itself (backpressure), and fails if it cannot.
//
// Kinds only the log writes (Kind.LogOnly: audit.prune) are refused with
// ErrReservedKind.
//
// An error wrapping ErrUnavailable means the entry is not known to be
// recorded: the caller must treat the action as not allowed. (A
// synchronous entry whose write failed stays queued and may still reach
// the disk on a later write; nothing already queued is ever dropped.)
func (l *Log) Append(ctx context.Context, e Entry) (uint64, error) {
	if !ValidKind(e.Kind) {
		return 0, fmt.Errorf("audit: invalid kind %q", e.Kind)
	}
	if e.Kind.LogOnly() {
		return 0, fmt.Errorf("audit: %w: %s entries are written only by the log (Prune)", ErrReservedKind, e.Kind)
	}
	if err := checkPayloadKind(e); err != nil {
		return 0, err
	}
	p, err := payloadJSON(e.Payload)
	if err != nil {
		return 0, err
	}
	e.Payload = rawPayload(p)
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	link, traced := telemetry.LinkFrom(ctx)
	if traced && e.Trace == "" {
		e.Trace = link.TraceID()
	}
	l.mu.Lock()
	for len(l.pending)+l.inflight >= l.opts.MaxPending && !l.closed {
		l.mu.Unlock()
		if err := l.flush(ctx, 0, false); err != nil {
			return 0, fmt.Errorf("%w: %s entry not recorded: %d entries queued and they cannot be written: %w", ErrUnavailable, e.Kind, l.opts.MaxPending, err)
		}
		l.mu.Lock()
	}
	if l.closed {
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, ErrClosed)
	}
	e.Seq = l.size + 1
	body, err := e.Encode()
	if err != nil {
		l.mu.Unlock()
		return 0, err
	}
	hash := l.chainer.sum(l.chain, e.Seq, body)
	if err := l.rng.Append(leafHash(hash), nil); err != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("audit: %w", err)
	}
	l.size, l.chain = e.Seq, hash
	l.pending = append(l.pending, row{seq: e.Seq, body: body, hash: hash})
	n := len(l.pending)
	l.mu.Unlock()
	if traced {
		link.Produced(e.Seq)
	}
	if e.Kind.Synchronous() {
		if err := l.flush(ctx, e.Seq, false); err != nil {
			return 0, fmt.Errorf("%w: %s entry %d not confirmed durable: %w", ErrUnavailable, e.Kind, e.Seq, err)
		}
		return e.Seq, nil
	}
	if n >= l.opts.FlushEntries {
		select {
		case l.flushNow <- struct{}{}:
		default:
		}
	}
	return e.Seq, nil
}

// rawPayload marks a payload as already canonical.
type rawPayload []byte

// Flush writes every queued entry and returns once they are durable.
func (l *Log) Flush(ctx context.Context) error {
	if err := l.flush(ctx, 0, false); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Checkpoint writes every queued entry and signs a checkpoint at the
// current size (unless the newest checkpoint already covers it).
func (l *Log) Checkpoint(ctx context.Context) (Checkpoint, error) {
	if err := l.flush(ctx, 0, true); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return l.Reader().NewestCheckpoint(ctx, l.key.Verifier)
}

// Close stops the background writer, writes what is queued, signs a final
// checkpoint and closes the database. Appends after Close fail.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	err := l.flush(context.Background(), 0, true)
	l.closePrepared()
	var cerr error
	if l.opts.KeepWAL {
		_, cerr = closeKeepingWAL(l.db.DB)
	} else {
		cerr = l.db.Close()
	}
	if err == nil && cerr != nil {
		err = fmt.Errorf("audit: close: %w", cerr)
	}
	// As with its writes, a failure of the checkpoint file weakens the
	// truncation check but loses nothing: log it.
	if werr := l.witness.close(); werr != nil {
		l.opts.Logger.Error("audit: the checkpoint file kept outside the database", "path", l.witness.path, "err", werr)
	}
	l.lock.Release()
	return err
}

// flusher writes buffered entries every FlushInterval, when signalled,
// and signs time-based checkpoints. It owns ctx; Close cancels it.
func (l *Log) flusher(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.flushNow:
		}
		if err := l.flush(ctx, 0, false); err != nil && ctx.Err() == nil {
			l.mu.Lock()
			n := len(l.pending)
			l.mu.Unlock()
			l.opts.Logger.Error("audit: writing queued entries failed; they stay queued, and appends fail once the queue is full", "pending", n, "err", err)
		}
	}
}

// flush writes the queue. With upTo > 0 it returns at once when entry
// upTo is already durable (another caller's write took it along). On
// error the entries stay queued, in order.
func (l *Log) flush(ctx context.Context, upTo uint64, forceCheckpoint bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.flushHeld(ctx, upTo, forceCheckpoint)
}

// flushHeld is flush with wmu held. mu is held only to take the queue
// and a snapshot of the tree (size, root, chain hash): the Ed25519
// signatures and the SQLite transaction run without it, so Append never
// waits for them.
func (l *Log) flushHeld(ctx context.Context, upTo uint64, forceCheckpoint bool) error {
	now := l.opts.Now()
	l.mu.Lock()
	if upTo > 0 && l.durable >= upTo {
		l.mu.Unlock()
		return nil
	}
	batch := l.pending
	l.pending, l.spare = l.spare, nil
	l.inflight = len(batch)
	due := l.checkpointDue(now, forceCheckpoint)
	var st treeState
	var packed []byte
	if due || len(batch) > 0 {
		st = treeState{size: l.size, root: rootOf(l.rng), chain: l.chain}
	}
	if due {
		packed = packRange(l.rng)
	}
	l.mu.Unlock()
	var cp, head *Checkpoint
	var err error
	if due || len(batch) > 0 {
		// The head and a due checkpoint describe the same state: one
		// signature serves both (Ed25519 signatures are deterministic).
		var c Checkpoint
		if c, err = signCheckpoint(l.key.Signer, st.size, st.root, st.chain); err == nil {
			if due {
				cp = &c
			}
			if len(batch) > 0 {
				head = &c
			}
		}
	}
	if err == nil && (len(batch) > 0 || cp != nil) {
		err = l.commit(ctx, batch, cp, packed, head, nil)
	}
	l.mu.Lock()
	l.inflight = 0
	if err != nil {
		l.pending = append(batch, l.pending...)
		l.mu.Unlock()
		return err
	}
	if len(batch) > 0 {
		l.durable = batch[len(batch)-1].seq
		// Keep the written batch's array for the next queue (double
		// buffering), without holding on to its entries.
		clear(batch)
		if l.spare == nil && cap(batch) <= 2*l.opts.MaxPending {
			l.spare = batch[:0]
		}
	}
	l.mu.Unlock()
	l.checkpointed(cp, head, now)
	return nil
}

// treeState is the log's state a checkpoint signs.
type treeState struct {
	size        uint64
	root, chain []byte
}

// checkpointDue reports whether a checkpoint is due at the current size
// (or forced and the newest does not cover it). mu held.
func (l *Log) checkpointDue(now time.Time, force bool) bool {
	return l.size > l.cpSize && (force ||
		l.size-l.cpSize >= uint64(l.opts.CheckpointEvery) ||
		now.Sub(l.cpTime) >= l.opts.CheckpointAfter)
}

// dueCheckpoint signs a checkpoint at the current size when one is due
// (or forced and the newest does not cover the current size). mu held.
func (l *Log) dueCheckpoint(now time.Time, force bool) (*Checkpoint, []byte, error) {
	if !l.checkpointDue(now, force) {
		return nil, nil, nil
	}
	cp, err := signCheckpoint(l.key.Signer, l.size, rootOf(l.rng), l.chain)
	if err != nil {
		return nil, nil, err
	}
	return &cp, packRange(l.rng), nil
}

// signHead signs the current state, which the next commit makes the
// head. mu held.
func (l *Log) signHead() (*Checkpoint, error) {
	cp, err := signCheckpoint(l.key.Signer, l.size, rootOf(l.rng), l.chain)
	if err != nil {
		return nil, err
	}
	return &cp, nil
}

// checkpointed records a written checkpoint cp and head (either may be
// nil), and writes the newest into the checkpoint file outside the
// database: what reveals a truncated or replaced database. The commit
// that wrote them has returned, so the file never gets ahead of the
// database on disk. The database already has them, so failing here
// weakens that check but loses nothing. wmu held.
func (l *Log) checkpointed(cp, head *Checkpoint, now time.Time) {
	if cp != nil {
		l.mu.Lock()
		if cp.Size > l.cpSize {
			l.cpSize, l.cpTime = cp.Size, now
		}
		l.mu.Unlock()
	}
	newest := head
	if newest == nil || cp != nil && cp.Size > newest.Size {
		newest = cp
	}
	if newest == nil {
		return
	}
	if err := l.witness.write(newest.Note); err != nil {
		l.opts.Logger.Error("audit: could not keep a copy of the newest checkpoint outside the database", "err", err)
	}
}

// insertChunk is the most entries one INSERT statement writes (3
// parameters each, far below SQLite's limit of 32,766).
const insertChunk = 128

// insertSQL returns the INSERT statement for n entries. wmu held.
func (l *Log) insertSQL(n int) string {
	if q, ok := l.inserts[n]; ok {
		return q
	}
	var b strings.Builder
	b.WriteString("INSERT INTO entries (seq, body, hash) VALUES (?, ?, ?)")
	for range n - 1 {
		b.WriteString(", (?, ?, ?)")
	}
	q := b.String()
	if l.inserts == nil {
		l.inserts = map[int]string{}
	}
	if len(l.inserts) < 16 {
		l.inserts[n] = q
	}
	return q
}

const (
	insertCheckpointSQL = `INSERT OR REPLACE INTO checkpoints (size, note, range) VALUES (?, ?, ?)`
	updateHeadSQL       = `INSERT OR REPLACE INTO head (id, note) VALUES (1, ?)`
)

// prepare prepares the statements every commit runs (Open).
func (l *Log) prepare(ctx context.Context) error {
	for _, p := range []struct {
		stmt  **sql.Stmt
		query string
	}{{&l.prepared.insert1, l.insertSQL(1)}, {&l.prepared.head, updateHeadSQL}, {&l.prepared.checkpoint, insertCheckpointSQL}} {
		s, err := l.db.PrepareContext(ctx, p.query)
		if err != nil {
			l.closePrepared()
			return fmt.Errorf("audit: prepare %q: %w", p.query, err)
		}
		*p.stmt = s
	}
	return nil
}

// closePrepared closes the prepared statements (Close, before the
// database).
func (l *Log) closePrepared() {
	for _, s := range []**sql.Stmt{&l.prepared.insert1, &l.prepared.head, &l.prepared.checkpoint} {
		if *s != nil {
			(*s).Close()
			*s = nil
		}
	}
}

// exec runs query in tx, by stmt (query prepared) when there is one.
func (l *Log) exec(ctx context.Context, tx *sql.Tx, stmt *sql.Stmt, query string, args ...any) (sql.Result, error) {
	if stmt != nil {
		return tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// commit writes entries, a checkpoint and whatever extra does in one
// transaction. wmu held.
func (l *Log) commit(ctx context.Context, batch []row, cp *Checkpoint, packed []byte, head *Checkpoint, extra func(*sql.Tx) error) error {
	// A write, once started, completes: cancelling the caller's context
	// must not leave it half done (and an uncancellable context spares the
	// driver a watcher goroutine per statement).
	ctx = context.WithoutCancel(ctx)
	err := l.db.Tx(ctx, func(tx *sql.Tx) error {
		// Rows go in by insertChunk per statement: one statement per
		// chunk instead of one per entry (the writer's CPU and garbage).
		for len(batch) > 0 {
			n := min(len(batch), insertChunk)
			args := l.insertArgs[:0]
			for _, r := range batch[:n] {
				args = append(args, int64(r.seq), string(r.body), r.hash)
			}
			var stmt *sql.Stmt
			if n == 1 {
				stmt = l.prepared.insert1
			}
			if _, err := l.exec(ctx, tx, stmt, l.insertSQL(n), args...); err != nil {
				return fmt.Errorf("insert entries %d..%d: %w", batch[0].seq, batch[n-1].seq, err)
			}
			clear(args)
			l.insertArgs = args[:0]
			batch = batch[n:]
		}
		if cp != nil {
			if _, err := l.exec(ctx, tx, l.prepared.checkpoint, insertCheckpointSQL,
				int64(cp.Size), string(cp.Note), packed); err != nil {
				return fmt.Errorf("insert checkpoint %d: %w", cp.Size, err)
			}
		}
		if head != nil {
			if _, err := l.exec(ctx, tx, l.prepared.head, updateHeadSQL, string(head.Note)); err != nil {
				return fmt.Errorf("update head: %w", err)
			}
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: write %s: %w", l.opts.Path, err)
	}
	return nil
}
