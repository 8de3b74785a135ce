package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

// SandboxHost is what the sandbox server's commands share: one native
// runtime per degradation setting, which keeps a sandbox started ahead of
// the next command, and the audit logs they write, kept open between
// commands (and closed after a short idle, so that other fluffy processes
// can take the log's writer lock).
type SandboxHost struct {
	self   string
	logger *slog.Logger
	spares int
	idle   time.Duration

	mu       sync.Mutex
	closed   bool
	runtimes map[bool]*native.Runtime // by AllowDegraded
	audits   map[string]*sharedAudit  // by database path
}

// SandboxHostOptions configure a SandboxHost.
type SandboxHostOptions struct {
	// Self is the fluffy binary; the sandbox init is found beside it.
	Self   string
	Logger *slog.Logger
	// Spares is how many sandboxes each runtime keeps started ahead.
	Spares int
	// AuditIdle is how long an audit log stays open after its last
	// entry (default 2s).
	AuditIdle time.Duration
}

// NewSandboxHost returns a host; Close releases what it holds.
func NewSandboxHost(opts SandboxHostOptions) *SandboxHost {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AuditIdle <= 0 {
		opts.AuditIdle = 2 * time.Second
	}
	return &SandboxHost{self: opts.Self, logger: opts.Logger, spares: opts.Spares, idle: opts.AuditIdle,
		runtimes: map[bool]*native.Runtime{}, audits: map[string]*sharedAudit{}}
}

var errHostClosed = errors.New("the sandbox server is shutting down")

// runtime returns the shared native runtime for allowDegraded.
func (h *SandboxHost) runtime(allowDegraded bool) (*native.Runtime, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHostClosed
	}
	if rt := h.runtimes[allowDegraded]; rt != nil {
		return rt, nil
	}
	rt, err := native.New(native.Options{Self: h.self, AllowDegraded: allowDegraded, Logger: h.logger, Spares: h.spares})
	if err != nil {
		return nil, err
	}
	rt.Prepare()
	go func() {
		// Cgroups of sandboxes whose fluffy was killed (kill -9).
		if n, err := rt.SweepStale(); err != nil {
			h.logger.Warn("sandbox: removing what killed fluffy processes left", "err", err)
		} else if n > 0 {
			h.logger.Info("sandbox: removed the cgroups killed fluffy processes left", "count", n)
		}
	}()
	h.runtimes[allowDegraded] = rt
	return rt, nil
}

// auditLog returns the shared audit log of a's data directory, opened
// with a's configuration on first use.
func (h *SandboxHost) auditLog(ctx context.Context, a *App) (auditSink, error) {
	opts, err := auditLogOptions(a, 5*time.Second, true)
	if err != nil {
		return nil, err
	}
	opts.Logger = h.logger
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHostClosed
	}
	s := h.audits[opts.Path]
	if s == nil {
		s = &sharedAudit{logger: h.logger, idle: h.idle, open: func(ctx context.Context) (*audit.Log, error) {
			return audit.Open(ctx, opts)
		}}
		h.audits[opts.Path] = s
	}
	return hostAudit{s}, nil
}

// hostAudit is one command's use of a shared log: its Close only makes
// the command's entries durable; the host closes the log.
type hostAudit struct{ *sharedAudit }

func (l hostAudit) Close() error { return l.Flush(context.Background()) }

// Close closes the runtimes (killing their spare sandboxes) and the audit
// logs. Commands still running must have ended.
func (h *SandboxHost) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var errs []error
	for _, rt := range h.runtimes {
		if err := rt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox runtime: %w", err))
		}
	}
	for p, s := range h.audits {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("audit log %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
