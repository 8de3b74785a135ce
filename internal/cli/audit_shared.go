package cli

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// sharedAudit is the kernel's audit log, held open only while it is being
// written: it opens on the first entry and closes after idle without one.
// Only one process may hold the log's writer lock, so a kernel that kept
// it open for its whole life would lock `fluffy sandbox run` and
// `fluffy audit append` out between sessions.
type sharedAudit struct {
	open   func(ctx context.Context) (*audit.Log, error)
	logger *slog.Logger
	idle   time.Duration

	mu    sync.Mutex
	l     *audit.Log
	timer *time.Timer
	// held counts the sandbox server's commands using the log
	// (hostAudit).
	held atomic.Int32
}

func newSharedAudit(a *App, idle time.Duration) *sharedAudit {
	return &sharedAudit{open: func(ctx context.Context) (*audit.Log, error) {
		return openAuditLogWait(ctx, a, 5*time.Second, true)
	}, logger: a.Logger(), idle: idle}
}

// use runs fn with the open log, opening it if needed (waiting up to 5s
// for another writer), and re-arms the idle close.
func (s *sharedAudit) use(ctx context.Context, fn func(*audit.Log) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		l, err := s.open(ctx)
		if err != nil {
			return err
		}
		s.l = l
	}
	err := fn(s.l)
	if s.timer == nil {
		s.timer = time.AfterFunc(s.idle, s.closeIdle)
	} else {
		s.timer.Reset(s.idle)
	}
	return err
}

func (s *sharedAudit) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l != nil {
		if err := s.l.Close(); err != nil {
			s.logger.Error("close the audit log", "err", err)
		}
		s.l = nil
	}
}

// Append implements kernel.AuditLog.
func (s *sharedAudit) Append(ctx context.Context, e audit.Entry) (uint64, error) {
	var seq uint64
	err := s.use(ctx, func(l *audit.Log) (err error) {
		seq, err = l.Append(ctx, e)
		return err
	})
	return seq, err
}

// Flush implements kernel.AuditLog; nothing is pending when the log is
// closed (Close flushes).
func (s *sharedAudit) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		return nil
	}
	return s.l.Flush(ctx)
}

// VerifyAtStart implements kernel.AuditLog.
func (s *sharedAudit) VerifyAtStart(ctx context.Context) (audit.Report, error) {
	var rep audit.Report
	err := s.use(ctx, func(l *audit.Log) (err error) {
		rep, err = l.VerifyAtStart(ctx)
		return err
	})
	return rep, err
}

// Close closes the log if it is open.
func (s *sharedAudit) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.l == nil {
		return nil
	}
	err := s.l.Close()
	s.l = nil
	return err
}
