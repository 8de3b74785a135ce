package audit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Shared is an audit log held open only while it is being written: it
// opens on the first entry and closes after idle without one. Only one
// process may hold the log's writer lock, so a long-lived process (the
// kernel, the sandbox server) that kept it open for its whole life would
// lock `fluffy sandbox run` and `fluffy audit append` out.
type Shared struct {
	open   func(ctx context.Context) (*Log, error)
	logger *slog.Logger
	idle   time.Duration

	mu    sync.Mutex
	l     *Log
	timer *time.Timer
	// cur is l, read without mu: Pending must not wait behind an
	// Append that waits for the disk.
	cur atomic.Pointer[Log]
	// held counts the users that asked the log to stay open (Hold).
	held atomic.Int32
}

// NewShared returns a Shared log opened with open, closed after idle
// without an entry; logger reports failures to close it.
func NewShared(open func(ctx context.Context) (*Log, error), idle time.Duration, logger *slog.Logger) *Shared {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Shared{open: open, logger: logger, idle: idle}
}

// Use runs fn with the open log, opening it if needed, and re-arms the
// idle close.
func (s *Shared) Use(ctx context.Context, fn func(*Log) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		l, err := s.open(ctx)
		if err != nil {
			return err
		}
		s.l = l
		s.cur.Store(l)
	}
	err := fn(s.l)
	if s.timer == nil {
		s.timer = time.AfterFunc(s.idle, s.CloseIdle)
	} else {
		s.timer.Reset(s.idle)
	}
	return err
}

// CloseIdle closes the log now if it is open; the next entry opens it
// again.
func (s *Shared) CloseIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l != nil {
		s.cur.Store(nil)
		if err := s.l.Close(); err != nil {
			s.logger.Error("close the audit log", "err", err)
		}
		s.l = nil
	}
}

// Pending is the open log's Pending, 0 while it is closed (a closed log
// has written everything). It never waits for an Append.
func (s *Shared) Pending() int {
	if l := s.cur.Load(); l != nil {
		return l.Pending()
	}
	return 0
}

// Hold marks one more user that needs the log to stay open (a command
// running in the sandbox server); Unhold ends it. Held reports whether
// any user holds it: a holder of the log's lock asked to let go closes
// only a log nobody holds.
func (s *Shared) Hold()      { s.held.Add(1) }
func (s *Shared) Unhold()    { s.held.Add(-1) }
func (s *Shared) Held() bool { return s.held.Load() > 0 }

// IsOpen reports whether the log is open now.
func (s *Shared) IsOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l != nil
}

// Append appends e (kernel.AuditLog).
func (s *Shared) Append(ctx context.Context, e Entry) (uint64, error) {
	var seq uint64
	err := s.Use(ctx, func(l *Log) (err error) {
		seq, err = l.Append(ctx, e)
		return err
	})
	return seq, err
}

// Flush makes the appended entries durable; nothing is pending when the
// log is closed (Close flushes).
func (s *Shared) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		return nil
	}
	return s.l.Flush(ctx)
}

// VerifyAtStart verifies the log as a process does when it starts
// (kernel.AuditLog).
func (s *Shared) VerifyAtStart(ctx context.Context) (Report, error) {
	var rep Report
	err := s.Use(ctx, func(l *Log) (err error) {
		rep, err = l.VerifyAtStart(ctx)
		return err
	})
	return rep, err
}

// Close closes the log if it is open.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.l == nil {
		return nil
	}
	s.cur.Store(nil)
	err := s.l.Close()
	s.l = nil
	return err
}
