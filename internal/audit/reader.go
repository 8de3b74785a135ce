package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// Reader reads an audit database: entries, checkpoints, statistics,
// verification, proofs and exports. It never appends, so it may be used
// while a Log has the database open in another process.
type Reader struct {
	db interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		Close() error
	}
	path string
}

// OpenReader opens an existing audit database for reading. It returns an
// error wrapping ErrNoLog when path does not exist.
func OpenReader(ctx context.Context, path string) (*Reader, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoLog, path)
	}
	db, err := openDB(ctx, path)
	if err != nil {
		return nil, err
	}
	return &Reader{db: db, path: path}, nil
}

// Close closes the database.
func (r *Reader) Close() error { return r.db.Close() }

// Origin is the log's name, recorded when it was created.
func (r *Reader) Origin(ctx context.Context) (string, error) {
	var s string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'origin'`).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("audit: read origin: %w", err)
	}
	return s, nil
}

// resumeState is what a writer resumes from (Log.open).
type resumeState struct {
	origin string
	anchor uint64
	// cps is the newest periodic checkpoint (a short-lived writer such
	// as 'fluffy sandbox run' adds one per run: never scan them all),
	// then the head when it is newer.
	cps []storedCheckpoint
	// tail is the entries after the newest periodic checkpoint, in order
	// (seq and hash only).
	tail []row
}

// resume reads a writer's resume state in one query: with this driver
// every query costs a statement preparation (about 0.15 ms), and opening
// the log is on `fluffy sandbox run`'s path to starting the command.
func (r *Reader) resume(ctx context.Context) (resumeState, error) {
	var st resumeState
	rows, err := r.db.QueryContext(ctx, `
		SELECT 0, 0, key, value FROM meta WHERE key IN ('origin', 'anchor')
		UNION ALL SELECT 1, size, note, range FROM checkpoints WHERE size = (SELECT max(size) FROM checkpoints)
		UNION ALL SELECT 2, 0, note, NULL FROM head WHERE id = 1
		UNION ALL SELECT 3, seq, NULL, hash FROM entries WHERE seq > (SELECT coalesce(max(size), 0) FROM checkpoints)
		ORDER BY 1, 2`)
	if err != nil {
		return st, fmt.Errorf("audit: read the log's state: %w", err)
	}
	defer rows.Close()
	var head []byte
	for rows.Next() {
		var t, k int64
		var a, b []byte
		if err := rows.Scan(&t, &k, &a, &b); err != nil {
			return st, fmt.Errorf("audit: read the log's state: %w", err)
		}
		switch t {
		case 0:
			if string(a) == "origin" {
				st.origin = string(b)
			} else if st.anchor, err = strconv.ParseUint(string(b), 10, 64); err != nil {
				return st, fmt.Errorf("audit: meta anchor = %q: %w", b, err)
			}
		case 1:
			st.cps = append(st.cps, storedCheckpoint{size: uint64(k), note: a, rng: b})
		case 2:
			head = a
		case 3:
			st.tail = append(st.tail, row{seq: uint64(k), hash: b})
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("audit: read the log's state: %w", err)
	}
	if head != nil {
		st.cps, err = withHead(st.cps, head)
	}
	return st, err
}

// originAnchor reads the origin and the retention anchor (0 when none) in
// one query.
func (r *Reader) originAnchor(ctx context.Context) (origin string, anchor uint64, err error) {
	rows, err := r.db.QueryContext(ctx, `SELECT key, value FROM meta WHERE key IN ('origin', 'anchor')`)
	if err != nil {
		return "", 0, fmt.Errorf("audit: read meta: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return "", 0, fmt.Errorf("audit: read meta: %w", err)
		}
		if k == "origin" {
			origin = v
		} else if anchor, err = strconv.ParseUint(v, 10, 64); err != nil {
			return "", 0, fmt.Errorf("audit: meta anchor = %q: %w", v, err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", 0, fmt.Errorf("audit: read meta: %w", err)
	}
	return origin, anchor, nil
}

func (r *Reader) metaUint(ctx context.Context, key string) (uint64, error) {
	var s string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", key, err)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("audit: meta %s = %q: %w", key, s, err)
	}
	return v, nil
}

type storedCheckpoint struct {
	size uint64
	note []byte
	rng  []byte // nil for the head
}

// storedCheckpoints returns the checkpoints in ascending order of size:
// the periodic ones (with their compact ranges) and, when it is newer,
// the head.
func (r *Reader) storedCheckpoints(ctx context.Context) ([]storedCheckpoint, error) {
	cps, err := r.periodicCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	var note string
	err = r.db.QueryRowContext(ctx, `SELECT note FROM head WHERE id = 1`).Scan(&note)
	if errors.Is(err, sql.ErrNoRows) {
		return cps, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: read head: %w", err)
	}
	return withHead(cps, []byte(note))
}

// withHead appends the head checkpoint to cps (ascending periodic
// checkpoints) when it is newer than the last of them. Its size is read
// from its second line; the caller verifies the note.
func withHead(cps []storedCheckpoint, head []byte) ([]storedCheckpoint, error) {
	_, rest, _ := strings.Cut(string(head), "\n")
	line, _, _ := strings.Cut(rest, "\n")
	size, err := strconv.ParseUint(line, 10, 64)
	if err != nil {
		return nil, damage(1, DamageCheckpoint, "the head checkpoint is malformed: tree size %q", line)
	}
	if n := len(cps); n == 0 || cps[n-1].size < size {
		cps = append(cps, storedCheckpoint{size: size, note: head})
	}
	return cps, nil
}

func (r *Reader) periodicCheckpoints(ctx context.Context) ([]storedCheckpoint, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT size, note, range FROM checkpoints ORDER BY size`)
	if err != nil {
		return nil, fmt.Errorf("audit: read checkpoints: %w", err)
	}
	defer rows.Close()
	var out []storedCheckpoint
	for rows.Next() {
		var c storedCheckpoint
		var size int64
		var note string
		if err := rows.Scan(&size, &note, &c.rng); err != nil {
			return nil, fmt.Errorf("audit: read checkpoints: %w", err)
		}
		c.size, c.note = uint64(size), []byte(note)
		out = append(out, c)
	}
	return out, rows.Err()
}

// rows calls fn for each stored entry with seq >= from, in order.
func (r *Reader) rows(ctx context.Context, from uint64, fn func(row) error) error {
	rows, err := r.db.QueryContext(ctx, `SELECT seq, body, hash FROM entries WHERE seq >= ? ORDER BY seq`, int64(from))
	if err != nil {
		return fmt.Errorf("audit: read entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var body sql.RawBytes
		var hash []byte
		if err := rows.Scan(&seq, &body, &hash); err != nil {
			return fmt.Errorf("audit: read entries: %w", err)
		}
		if err := fn(row{seq: uint64(seq), body: body, hash: hash}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: read entries: %w", err)
	}
	return nil
}

// rowsPrefetch is rows with the database reads in goroutines of their
// own, ahead of fn, so reading and hashing use several cores. fn runs in
// the caller's goroutine, for exactly the rows rows would give, in the
// same order; the row's slices are valid during the call.
//
// A long log is read in chunks of consecutive sequence numbers
// ([from, from+n), [from+n, from+2n), ..., and the last one open-ended),
// alternately by two readers on two connections; fn is given chunk after
// chunk in order. The chunks partition every value seq >= from can take
// (an edited database included), so their concatenation is what the one
// query "seq >= from ORDER BY seq" gives.
func (r *Reader) rowsPrefetch(ctx context.Context, from uint64, fn func(row) error) error {
	const (
		maxChunks = 256
		readers   = 2
	)
	batchSize, minChunk := prefetchBatch, prefetchChunk
	// Chunk bounds: chunk i is [lo[i], lo[i+1]), the last has no upper
	// bound. A short log, or one whose highest seq is unreadable, is one
	// chunk.
	lo := []int64{int64(from)}
	var hi sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT max(seq) FROM entries`).Scan(&hi); err == nil && hi.Valid && hi.Int64 > int64(from) {
		if span := uint64(hi.Int64) - from + 1; span >= readers*uint64(minChunk) {
			n := max(uint64(minChunk), span/maxChunks+1)
			for a := from + n; a <= uint64(hi.Int64); a += n {
				lo = append(lo, int64(a))
			}
		}
	}

	type batch = rowBatch
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each reader can read a whole chunk ahead while fn works through the
	// other's.
	perChunk := minChunk/batchSize + 2
	nr := min(readers, len(lo))
	chans := make([]chan *batch, nr)
	errs := make([]chan error, nr)
	// Batches fn is done with come back through free, so the readers
	// reuse their buffers instead of allocating new ones.
	free := make(chan *batch, nr*(perChunk+2))
	newBatch := func() *batch {
		select {
		case b := <-free:
			b.rows, b.arena, b.last = b.rows[:0], b.arena[:0], false
			return b
		default:
			return &batch{rows: make([]row, 0, batchSize), arena: make([]byte, 0, batchSize*320)}
		}
	}
	for p := range nr {
		ch, errc := make(chan *batch, perChunk), make(chan error, 1)
		chans[p], errs[p] = ch, errc
		go func() {
			defer close(ch)
			errc <- func() error {
				for i := p; i < len(lo); i += nr {
					if err := r.readChunk(ctx, lo, i, batchSize, newBatch, func(b *batch) bool {
						select {
						case ch <- b:
							return true
						case <-ctx.Done():
							return false
						}
					}); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	// stop ends the readers and returns the first error among want and
	// theirs.
	stop := func(want error) error {
		cancel()
		for p := range nr {
			for range chans[p] {
			}
			if err := <-errs[p]; want == nil {
				want = err
			}
		}
		return want
	}
	for i := range lo {
		p := i % nr
		for done := false; !done; {
			b, ok := <-chans[p]
			if !ok {
				// The reader stopped before the chunk's end: its error.
				err := <-errs[p]
				errs[p] <- err
				if err == nil {
					err = fmt.Errorf("audit: read entries: reader stopped early")
				}
				return stop(err)
			}
			for _, rw := range b.rows {
				if err := fn(rw); err != nil {
					return stop(err)
				}
			}
			done = b.last
			// fn is done with the batch's rows: hand it back for reuse.
			select {
			case free <- b:
			default:
			}
		}
	}
	return stop(nil)
}

// The sizes rowsPrefetch reads in (variables for tests): rows per batch
// and the least number of sequence numbers per chunk.
var prefetchBatch, prefetchChunk = 1024, 16 * 1024

// rowBatch is rows read by rowsPrefetch, their slices in arena.
type rowBatch struct {
	rows  []row
	arena []byte
	last  bool // the last batch of its chunk
}

// readChunk reads chunk i of rowsPrefetch (seq in [lo[i], lo[i+1]), or
// seq >= lo[i] for the last) into batches and sends them, the last one
// (possibly empty) marked; it returns early when send returns false.
func (r *Reader) readChunk(ctx context.Context, lo []int64, i, batchSize int, newBatch func() *rowBatch, send func(*rowBatch) bool) error {
	q, args := `SELECT seq, hash, body FROM entries WHERE seq >= ? ORDER BY seq`, []any{lo[i]}
	if i+1 < len(lo) {
		q, args = `SELECT seq, hash, body FROM entries WHERE seq >= ? AND seq < ? ORDER BY seq`, []any{lo[i], lo[i+1]}
	}
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("audit: read entries: %w", err)
	}
	defer rows.Close()
	b := newBatch()
	// Scan reuses these buffers (or points them at the driver's).
	var seq int64
	var hash, body sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&seq, &hash, &body); err != nil {
			return fmt.Errorf("audit: read entries: %w", err)
		}
		// Copy out of the scan buffers. Should the arena grow, earlier
		// rows keep pointing at the old array, which stays valid until
		// the batch is reused. hash is never nil here, so a NULL or empty
		// stored hash compares unequal instead of reading as "no stored
		// hash".
		off := len(b.arena)
		b.arena = append(append(b.arena, hash...), body...)
		mid, end := off+len(hash), len(b.arena)
		b.rows = append(b.rows, row{seq: uint64(seq), hash: b.arena[off:mid:mid], body: b.arena[mid:end:end]})
		if len(b.rows) == batchSize {
			if !send(b) {
				return ctx.Err()
			}
			b = newBatch()
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: read entries: %w", err)
	}
	b.last = true
	if !send(b) {
		return ctx.Err()
	}
	return nil
}

// Filter selects entries for Entries. Zero fields match everything.
type Filter struct {
	After   uint64 // only entries with a larger sequence number
	Session string
	// Tree: only the entries of this session and of its sub-agents at
	// every depth (those whose root it is).
	Tree string
	Kind Kind
	// Trace keeps the entries written under this OpenTelemetry trace
	// (its id in hex).
	Trace string
	Since time.Time
	Limit int // at most this many (0: no limit)
	// Last, with Limit, returns the newest Limit entries (still in
	// ascending order) instead of the oldest.
	Last bool
}

// Entries calls fn with each entry matching f, in ascending order. An
// entry whose stored bytes do not parse is an error.
func (r *Reader) Entries(ctx context.Context, f Filter, fn func(Entry) error) error {
	q := `SELECT seq, body FROM entries WHERE seq > ?`
	args := []any{int64(f.After)}
	if f.Session != "" {
		q += ` AND json_extract(body, '$.session') = ?`
		args = append(args, f.Session)
	}
	if f.Tree != "" {
		q += ` AND (json_extract(body, '$.session') = ? OR json_extract(body, '$.root') = ?)`
		args = append(args, f.Tree, f.Tree)
	}
	if f.Kind != "" {
		q += ` AND json_extract(body, '$.kind') = ?`
		args = append(args, string(f.Kind))
	}
	if f.Trace != "" {
		q += ` AND json_extract(body, '$.trace') = ?`
		args = append(args, strings.ToLower(f.Trace))
	}
	if !f.Since.IsZero() {
		q += ` AND json_extract(body, '$.time') >= ?`
		args = append(args, f.Since.UTC().Format(TimeFormat))
	}
	order := "ASC"
	if f.Last {
		order = "DESC"
	}
	q += ` ORDER BY seq ` + order
	if f.Limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	if f.Last {
		q = `SELECT seq, body FROM (` + q + `) ORDER BY seq ASC`
	}
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("audit: read entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var body string
		if err := rows.Scan(&seq, &body); err != nil {
			return fmt.Errorf("audit: read entries: %w", err)
		}
		e, err := ParseEntry([]byte(body))
		if err != nil {
			return fmt.Errorf("audit: entry %d: %w", seq, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// NewestCheckpoint returns the newest stored checkpoint, verified with vkey.
func (r *Reader) NewestCheckpoint(ctx context.Context, vkey string) (Checkpoint, error) {
	cps, err := r.storedCheckpoints(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	if len(cps) == 0 {
		return Checkpoint{}, fmt.Errorf("audit: no checkpoint yet")
	}
	return ParseCheckpoint(cps[len(cps)-1].note, vkey)
}
