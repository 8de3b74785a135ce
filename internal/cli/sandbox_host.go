package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

// SandboxHost is what the sandbox server's commands share: one native
// runtime per degradation setting, which keeps a sandbox built ahead for
// the next command (prepareNext), and the audit logs they write, kept open between
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
	audits   map[string]*audit.Shared // by database path

	// next is the throw-away change set a sandbox was built ahead on
	// (prepareNext), for the next run that needs one like it. Its own
	// lock: the runtimes report a discard while Close holds mu.
	nextMu sync.Mutex
	next   *nextScratch
}

// nextScratch is a throw-away change set made for the next run.
type nextScratch struct {
	// key says which runs it is for (scratchKey).
	key      string
	dir      string
	inMemory bool
	// taken: a run owns it (and removes it); dropped: its sandbox is
	// gone unused.
	taken, dropped bool
}

// SandboxHostOptions configure a SandboxHost.
type SandboxHostOptions struct {
	// Self is the fluffy binary; the sandbox init is found beside it.
	Self   string
	Logger *slog.Logger
	// Spares is how many sandboxes each runtime keeps started ahead.
	Spares int
	// AuditIdle is how long an audit log stays open after its last
	// entry (default 30s); another fluffy process that needs it asks the
	// server to close it sooner (releaseAudits).
	AuditIdle time.Duration
}

// NewSandboxHost returns a host; Close releases what it holds.
func NewSandboxHost(opts SandboxHostOptions) *SandboxHost {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AuditIdle <= 0 {
		opts.AuditIdle = 30 * time.Second
	}
	return &SandboxHost{self: opts.Self, logger: opts.Logger, spares: opts.Spares, idle: opts.AuditIdle,
		runtimes: map[bool]*native.Runtime{}, audits: map[string]*audit.Shared{}}
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
		// And their throw-away change sets in memory.
		if n, err := sweepScratch(); err != nil {
			h.logger.Warn("sandbox: removing the change sets killed fluffy processes left", "err", err)
		} else if n > 0 {
			h.logger.Info("sandbox: removed the change sets killed fluffy processes left", "count", n)
		}
	}()
	h.runtimes[allowDegraded] = rt
	return rt, nil
}

// scratchKey is what a throw-away change set made ahead must match to
// serve a run: the runtime, the workspace, and TMPDIR, which says where
// it goes (App.throwawayChangeSet).
func scratchKey(a *App, runtime, workspace string) string {
	tmp, _ := a.Getenv("TMPDIR")
	return runtime + "\x00" + workspace + "\x00" + tmp
}

// takeScratch returns the throw-away change set made ahead for runs of
// key, if there is one; the caller owns it from here.
func (h *SandboxHost) takeScratch(key string) (dir string, inMemory, ok bool) {
	h.nextMu.Lock()
	defer h.nextMu.Unlock()
	n := h.next
	if n == nil || n.key != key || n.dropped {
		return "", false, false
	}
	h.next, n.taken = nil, true
	return n.dir, n.inMemory, true
}

// prepareNext has rt build a sandbox ahead for the next run like spec (a
// run through this server on a throw-away change set, or without a
// workspace): on a new throw-away change set, which the next such run
// takes (takeScratch), and the sandbox with it. It replaces the one
// prepared before.
func (h *SandboxHost) prepareNext(a *App, rt *native.Runtime, runtime string, spec sandbox.Spec) {
	spec.Stdin, spec.Stdout, spec.Stderr = nil, nil, nil
	if spec.Workspace == "" {
		if err := rt.PrepareNext(spec, nil); err != nil {
			h.logger.Debug("sandbox: nothing built ahead", "err", err)
		}
		return
	}
	dir, inMemory, err := a.throwawayChangeSet(runtime)
	if err != nil {
		h.logger.Debug("sandbox: no change set for the next run", "err", err)
		return
	}
	n := &nextScratch{key: scratchKey(a, runtime, spec.Workspace), dir: dir, inMemory: inMemory}
	h.nextMu.Lock()
	h.next = n
	h.nextMu.Unlock()
	spec.ChangeSet = filepath.Join(dir, "upper")
	if err := rt.PrepareNext(spec, func() { h.dropScratch(n) }); err != nil {
		h.logger.Debug("sandbox: nothing built ahead", "err", err)
		h.dropScratch(n)
	}
}

// dropScratch forgets n, whose sandbox is gone unused, and removes its
// directory unless a run took it.
func (h *SandboxHost) dropScratch(n *nextScratch) {
	h.nextMu.Lock()
	n.dropped = true
	if h.next == n {
		h.next = nil
	}
	taken := n.taken
	h.nextMu.Unlock()
	if !taken {
		_ = os.RemoveAll(n.dir)
	}
}

// auditLog returns the shared audit log of a's data directory, opened
// with a's configuration on first use.
func (h *SandboxHost) auditLog(ctx context.Context, a *App) (auditSink, error) {
	opts, err := a.user().AuditOptions(5*time.Second, true)
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
		s = audit.NewShared(func(ctx context.Context) (*audit.Log, error) {
			return audit.Open(ctx, opts)
		}, h.idle, h.logger)
		h.audits[opts.Path] = s
	}
	s.Hold()
	return &hostAudit{Shared: s}, nil
}

// hostAudit is one command's use of a shared log: its Close only makes
// the command's entries durable; the host closes the log. While a
// command holds one, releaseAudits leaves the log open.
type hostAudit struct {
	*audit.Shared
	once sync.Once
}

func (l *hostAudit) Close() error {
	l.once.Do(l.Unhold)
	return l.Flush(context.Background())
}

// releaseAudits closes the audit logs no command is using, for another
// fluffy process waiting for the writer lock (it sends the server
// SIGUSR1: askServerToRelease). A command that starts meanwhile opens
// its log again, and waits for the lock like any other process.
func (h *SandboxHost) releaseAudits() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.audits {
		if !s.Held() {
			s.CloseIdle()
		}
	}
}

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
