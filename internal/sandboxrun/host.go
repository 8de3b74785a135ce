package sandboxrun

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
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// Host is what the sandbox server's runs share: one native runtime per
// degradation setting, which keeps a sandbox built ahead for the next
// run (prepareNext), and the audit logs they write, kept open between
// runs (and closed after a short idle, so that other fluffy processes
// can take the log's writer lock).
type Host struct {
	newRuntime func(allowDegraded bool) (AheadRuntime, error)
	logger     *slog.Logger
	idle       time.Duration

	mu       sync.Mutex
	closed   bool
	runtimes map[bool]AheadRuntime    // by AllowDegraded
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

// AheadRuntime is the sandbox server's runtime (native): it builds the
// next run's sandbox ahead.
type AheadRuntime interface {
	sandbox.Runtime
	// PrepareNext builds a sandbox for the next run like spec;
	// discarded is called if it goes unused.
	PrepareNext(spec sandbox.Spec, discarded func()) error
	// SweepStale removes what sandboxes of killed fluffy processes
	// left (their cgroups) and returns how many.
	SweepStale() (int, error)
	Close() error
}

// HostOptions configure a Host.
type HostOptions struct {
	// NewRuntime builds the shared runtime for allowDegraded, ready to
	// run (internal/wiring: the native one).
	NewRuntime func(allowDegraded bool) (AheadRuntime, error)
	Logger     *slog.Logger
	// AuditIdle is how long an audit log stays open after its last
	// entry (default 30s); another fluffy process that needs it asks the
	// server to close it sooner (ReleaseAudits, on SIGUSR1:
	// sandboxd.AskToReleaseAudit).
	AuditIdle time.Duration
}

// NewHost returns a host; Close releases what it holds.
func NewHost(opts HostOptions) *Host {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AuditIdle <= 0 {
		opts.AuditIdle = 30 * time.Second
	}
	return &Host{newRuntime: opts.NewRuntime, logger: opts.Logger, idle: opts.AuditIdle,
		runtimes: map[bool]AheadRuntime{}, audits: map[string]*audit.Shared{}}
}

var (
	errHostClosed = errors.New("the sandbox server is shutting down")
	errNoRuntime  = errors.New("the sandbox server has no runtime")
)

// Runtime returns the shared runtime for allowDegraded.
func (h *Host) Runtime(allowDegraded bool) (AheadRuntime, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHostClosed
	}
	if rt := h.runtimes[allowDegraded]; rt != nil {
		return rt, nil
	}
	if h.newRuntime == nil {
		return nil, errNoRuntime
	}
	rt, err := h.newRuntime(allowDegraded)
	if err != nil {
		return nil, err
	}
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
// it goes (throwawayChangeSet).
func scratchKey(u *userenv.Env, runtime, workspace string) string {
	tmp, _ := u.Getenv("TMPDIR")
	return runtime + "\x00" + workspace + "\x00" + tmp
}

// takeScratch returns the throw-away change set made ahead for runs of
// key, if there is one; the caller owns it from here.
func (h *Host) takeScratch(key string) (dir string, inMemory, ok bool) {
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
func (h *Host) prepareNext(u *userenv.Env, run sandbox.Runtime, runtime string, spec sandbox.Spec) {
	rt, ok := run.(AheadRuntime)
	if !ok {
		return
	}
	spec.Stdin, spec.Stdout, spec.Stderr = nil, nil, nil
	if spec.Workspace == "" {
		if err := rt.PrepareNext(spec, nil); err != nil {
			h.logger.Debug("sandbox: nothing built ahead", "err", err)
		}
		return
	}
	dir, inMemory, err := throwawayChangeSet(u, runtime)
	if err != nil {
		h.logger.Debug("sandbox: no change set for the next run", "err", err)
		return
	}
	n := &nextScratch{key: scratchKey(u, runtime, spec.Workspace), dir: dir, inMemory: inMemory}
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
func (h *Host) dropScratch(n *nextScratch) {
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

// auditLog returns the shared audit log of u's data directory, opened
// with u's configuration on first use.
func (h *Host) auditLog(u *userenv.Env) (AuditSink, error) {
	opts, err := u.AuditOptions(5*time.Second, true)
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
// command holds one, ReleaseAudits leaves the log open.
type hostAudit struct {
	*audit.Shared
	once sync.Once
}

func (l *hostAudit) Close() error {
	l.once.Do(l.Unhold)
	return l.Flush(context.Background())
}

// ReleaseAudits closes the audit logs no command is using, for another
// fluffy process waiting for the writer lock (it sends the server
// SIGUSR1: sandboxd.AskToReleaseAudit). A command that starts meanwhile
// opens its log again, and waits for the lock like any other process.
func (h *Host) ReleaseAudits() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.audits {
		if !s.Held() {
			s.CloseIdle()
		}
	}
}

// Close closes the runtimes (killing the sandboxes built ahead) and the audit
// logs. Commands still running must have ended.
func (h *Host) Close() error {
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
