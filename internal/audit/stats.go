package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Stats describes an audit database, for `fluffy doctor` and
// `fluffy audit log`. It reads without verifying.
type Stats struct {
	Path string
	// Bytes is the size on disk of the database and its WAL.
	Bytes int64
	// Entries is how many entries are stored; First and Last their range.
	Entries     uint64
	First, Last uint64
	Anchor      uint64
	// Checkpoint is the newest checkpoint's tree size (0: none) and
	// CheckpointTime when it was signed (the file time of the copy kept
	// under keys/, zero when unknown).
	Checkpoint     uint64
	CheckpointTime time.Time
	// FreeBytes is the space left to unprivileged writers on the
	// database's file system.
	FreeBytes uint64
}

// Warnings returns what `fluffy doctor` should show: the log past
// warnSize, or free disk below minFree (or below 10× the log's size when
// minFree is 0, at least 100 MiB).
func (s Stats) Warnings(warnSize int64, minFree uint64) []string {
	var w []string
	if warnSize > 0 && s.Bytes > warnSize {
		w = append(w, fmt.Sprintf("audit log %s is %d bytes, over the %d set by audit.warn_size: set audit.retention_days or archive it with 'fluffy audit export'", s.Path, s.Bytes, warnSize))
	}
	if minFree == 0 {
		minFree = max(uint64(s.Bytes)/10, 100<<20)
	}
	if s.FreeBytes < minFree {
		w = append(w, fmt.Sprintf("only %d bytes free on the file system of %s: when it fills up, every gated action is refused", s.FreeBytes, s.Path))
	}
	return w
}

// ReadStats returns the statistics of the audit database at path, and
// keyDir's checkpoint copy time. A missing database gives an error
// wrapping ErrNoLog.
func ReadStats(ctx context.Context, path, keyDir string) (Stats, error) {
	r, err := OpenReader(ctx, path)
	if err != nil {
		return Stats{Path: path}, err
	}
	defer r.Close()
	s, err := r.Stats(ctx)
	if fi, err := os.Stat(keyDir + "/" + CheckpointFile); err == nil {
		s.CheckpointTime = fi.ModTime()
	}
	return s, err
}

// Stats returns the statistics of the database.
func (r *Reader) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Path: r.path}
	var first, last sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT count(*), min(seq), max(seq) FROM entries`).Scan(&s.Entries, &first, &last); err != nil {
		return s, fmt.Errorf("audit: stats: %w", err)
	}
	s.First, s.Last = uint64(first.Int64), uint64(last.Int64)
	var cp sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT max(size) FROM checkpoints`).Scan(&cp); err != nil {
		return s, fmt.Errorf("audit: stats: %w", err)
	}
	s.Checkpoint = uint64(cp.Int64)
	var err error
	if s.Anchor, err = r.metaUint(ctx, "anchor"); err != nil {
		return s, err
	}
	if err := s.readDisk(); err != nil {
		return s, err
	}
	return s, nil
}

// readDisk fills Bytes and FreeBytes from the file system: what
// Warnings looks at, without reading the database.
func (s *Stats) readDisk() error {
	for _, p := range []string{s.Path, s.Path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			s.Bytes += fi.Size()
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit: stats: %w", err)
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.Path, &fs); err == nil {
		s.FreeBytes = fs.Bavail * uint64(fs.Bsize)
	}
	return nil
}

// TrustedCheckpoints returns the checkpoint copy kept under keyDir, if
// any, for VerifyOptions.Trusted.
func TrustedCheckpoints(keyDir string) ([][]byte, error) {
	b, err := os.ReadFile(keyDir + "/" + CheckpointFile)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(b) == 0 {
		// None yet (an empty file: created, then a crash before the
		// first write).
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return [][]byte{b}, nil
}

// VerifyAtStart is the check the kernel runs before it starts: an
// incremental verification from the last verified checkpoint, against the
// checkpoint copy kept under keys/, recording its progress. Any error
// means the kernel must not start.
func (l *Log) VerifyAtStart(ctx context.Context) (Report, error) {
	if err := l.Flush(ctx); err != nil {
		return Report{}, err
	}
	trusted, err := TrustedCheckpoints(l.opts.KeyDir)
	if err != nil {
		return Report{}, err
	}
	return l.Reader().Verify(ctx, VerifyOptions{Verifier: l.key.Verifier, Trusted: trusted, StateDir: l.opts.KeyDir})
}
