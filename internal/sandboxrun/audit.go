package sandboxrun

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// Recorder writes what one run's sandbox does into the audit log:
// exec.start before the command starts, exec.end before its result is
// used (on disk), and one net.request per egress request (NetRequest,
// from the egress proxy's recorder in internal/wiring). An error from any
// of them refuses the execution (sandbox.Observe) or the request (the
// proxy fails closed).
//
// The log is opened by Start, which sandbox.Observe runs while the native
// sandbox is being set up (the command waits for it): opening the SQLite
// log, loading the key and the durable exec.start cost the run no time
// unless they are slower than the sandbox's set-up.
type Recorder struct {
	open     func() (AuditSink, error)
	template string
	// closeAtEnd makes End close the log: the exec.end entry and the final
	// checkpoint are written in one transaction (no egress can follow).
	closeAtEnd bool
	// net is the egress allow-list for exec.start (nil: no proxy;
	// SetEgress).
	net map[string]any

	mu sync.Mutex
	// netOpen maps an allowed egress request's id to the sequence
	// number of its net.request entry, until its net.end.
	netOpen map[string]uint64
	// execSeq is the exec.start entry's sequence number: the run that
	// egress entries belong to.
	execSeq uint64
	log     AuditSink
	err     error
	closed  bool
}

var _ sandbox.Observer = (*Recorder)(nil)

// newRecorder returns a recorder for one run that opens the audit log
// when first needed (the sandbox server's shared one, with host),
// waiting a while for another fluffy command that holds the writer's
// lock.
func newRecorder(ctx context.Context, u *userenv.Env, host *Host, template string) *Recorder {
	if host != nil {
		return &Recorder{template: template, open: func() (AuditSink, error) {
			return host.auditLog(u)
		}}
	}
	return &Recorder{template: template, open: func() (AuditSink, error) {
		l, err := u.OpenAudit(ctx, 5*time.Second, true)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return l, nil
	}}
}

// NewRecorder returns a recorder whose log open opens when first needed.
func NewRecorder(template string, open func() (AuditSink, error)) *Recorder {
	return &Recorder{template: template, open: open}
}

// AuditSink is where a recorder's entries go: the log itself, opened by
// this run and closed at its end, or the sandbox server's shared log,
// which Close only flushes.
type AuditSink interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
	Flush(ctx context.Context) error
	Close() error
}

// get opens the log once; the error, if any, is kept.
func (r *Recorder) get() (AuditSink, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil && r.err == nil {
		if r.log, r.err = r.open(); r.err != nil {
			r.err = fmt.Errorf("cannot record the execution in the audit log, so it does not run: %w", r.err)
		}
	}
	return r.log, r.err
}

func (r *Recorder) Start(ctx context.Context, spec sandbox.Spec) error {
	log, err := r.get()
	if err != nil {
		return err
	}
	p := audit.ExecStart{
		Template: r.template, Argv: spec.Argv, Dir: spec.Dir, Workspace: spec.Workspace, ChangeSet: spec.ChangeSet,
		Network: string(spec.Network), Seccomp: spec.Seccomp,
		Limits: &audit.ExecLimits{
			WallMS: spec.Limits.Wall.Milliseconds(), Memory: spec.Limits.Memory, Pids: spec.Limits.Pids,
			CPUMS: spec.Limits.CPU.Milliseconds(), FileSize: spec.Limits.FileSize, OpenFiles: spec.Limits.OpenFiles,
			Output: spec.Limits.Output, Tmp: spec.TmpSize,
		},
	}
	r.mu.Lock()
	if r.net != nil {
		p.Egress = r.net
	}
	r.mu.Unlock()
	seq, err := log.Append(ctx, audit.Entry{Kind: audit.KindExecStart, Actor: "cli", Payload: p})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.execSeq = seq
	r.mu.Unlock()
	// exec.start is a buffered kind; the execution must not begin before
	// its record is durable.
	if err := log.Flush(ctx); err != nil {
		notRun(ctx, log, "cli", audit.ExecEnd{Template: r.template, Argv: spec.Argv}, err)
		return err
	}
	return nil
}

// notRun records, after an exec.start that could not be made durable,
// that the command did not run. Both stay queued in the log (a full disk)
// and are written in order once it can write again, so that the log never
// shows a start without its outcome for a command that never ran. Best
// effort: the caller reports the first failure.
func notRun(ctx context.Context, log AuditSink, actor string, payload audit.ExecEnd, why error) {
	payload.Error = audit.NotRun(why)
	_, _ = log.Append(context.WithoutCancel(ctx), audit.Entry{Kind: audit.KindExecEnd, Actor: actor, Payload: payload})
}

func (r *Recorder) End(ctx context.Context, spec sandbox.Spec, res sandbox.Result, runErr error) error {
	hit := make([]string, 0, len(res.Hit))
	for _, h := range res.Hit {
		hit = append(hit, string(h))
	}
	p := audit.ExecEnd{
		Template: r.template, Argv: spec.Argv, DurationUS: res.Duration.Microseconds(),
		Process: &audit.Process{ExitCode: res.ExitCode, Signal: res.Signal, Killed: string(res.Killed), LimitsHit: hit, Warnings: res.Warnings},
	}
	if runErr != nil {
		p.Error = runErr.Error()
	}
	log, err := r.get()
	if err != nil {
		return err
	}
	// The context may be cancelled (Ctrl-C); the record must still land.
	ctx = context.WithoutCancel(ctx)
	if _, err := log.Append(ctx, audit.Entry{Kind: audit.KindExecEnd, Actor: "cli", Payload: p}); err != nil {
		return err
	}
	if r.closeAtEnd {
		// Close writes the entry with the final checkpoint: one commit.
		return r.Close()
	}
	return log.Flush(ctx)
}

// Close closes the log if it was opened; later calls do nothing.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil || r.closed {
		return nil
	}
	r.closed = true
	return r.log.Close()
}

// SetEgress gives exec.start the run's egress allow-list: what it may
// reach.
func (r *Recorder) SetEgress(allow map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.net = allow
}

// NetRequest writes an egress request's decision as a net.request entry
// (payload p, plus the run's exec.start), durable before it returns: the
// proxy relays nothing before. An allowed request's id is kept for its
// NetEnd.
func (r *Recorder) NetRequest(ctx context.Context, session string, allowed bool, p audit.NetRequest) error {
	log, err := r.get()
	if err != nil {
		return err
	}
	r.mu.Lock()
	p.Exec = r.execSeq // the run whose sandbox asked
	r.mu.Unlock()
	seq, err := log.Append(ctx, audit.Entry{Session: session, Kind: audit.KindNetRequest, Actor: "sandbox", Payload: p})
	if err != nil {
		return err
	}
	// net.request is a buffered kind; nothing may be relayed before the
	// decision is on disk (as exec.start before a command starts).
	if err := log.Flush(ctx); err != nil {
		return err
	}
	if allowed {
		r.mu.Lock()
		if r.netOpen == nil {
			r.netOpen = map[string]uint64{}
		}
		r.netOpen[p.ID] = seq
		r.mu.Unlock()
	}
	return nil
}

// NetEnd writes an allowed request's outcome as a net.end entry that
// names its net.request by sequence number and by its id.
func (r *Recorder) NetEnd(ctx context.Context, session string, p audit.NetEnd) error {
	log, err := r.get()
	if err != nil {
		return err
	}
	r.mu.Lock()
	p.Exec = r.execSeq
	if seq, ok := r.netOpen[p.ID]; ok {
		p.Request = seq
		delete(r.netOpen, p.ID)
	}
	r.mu.Unlock()
	_, err = log.Append(ctx, audit.Entry{Session: session, Kind: audit.KindNetEnd, Actor: "sandbox", Payload: p})
	return err
}

// NetRefused writes a net.refused entry: who tried to use this run's
// proxy. It is not a request of the run's and is never recorded as one.
func (r *Recorder) NetRefused(ctx context.Context, session string, p audit.NetRefused) error {
	log, err := r.get()
	if err != nil {
		return err
	}
	r.mu.Lock()
	p.Exec = r.execSeq // the run whose proxy was approached
	r.mu.Unlock()
	_, err = log.Append(ctx, audit.Entry{Session: session, Kind: audit.KindNetRefused, Actor: "proxy", Payload: p})
	return err
}
