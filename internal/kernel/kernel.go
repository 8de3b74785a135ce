// Package kernel owns sessions: it connects the parts a session runs on —
// the model (llm), the agent loop, the tools (agent.Tools, built per session
// by the daemon side, internal/wiring), the session's change set and TDD
// machine, and the audit log — and serves them to clients over IPC. It also
// declares the kernel daemon's own wire types (daemon.go).
//
// A session is created over a workspace with a task and a model. Its writes
// land in a change set under the data directory's changesets/; the real tree
// changes only when the user applies it at close. The session row in
// fluffy.db holds the conversation, saved at every turn boundary and after
// every tool result, so a kernel that dies (kill -9) leaves each running
// session resumable: the next kernel marks it interrupted at start, and a
// resumed session never runs a tool call twice (a call whose result was not
// saved is answered "interrupted" instead of being run again).
//
// Errors are routed by class (see Fault): a model error (the provider failed
// after its own retries) pauses the session, which stays resumable; a tool
// error is not an error at all — the refusal or failure goes back to the model
// as the call's result; a runtime fault (the router could not process a call,
// the audit log cannot be written, a panic) fails the session closed.
//
// At start the kernel verifies the audit log (incremental VerifyAtStart) and
// refuses to start on any damage; kernel.start and kernel.stop are audited.
package kernel

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Sentinel errors callers branch on.
var (
	// ErrAuditDamaged: the audit log failed its start check; the kernel
	// does not start.
	ErrAuditDamaged = errors.New("kernel: the audit log failed verification")
	// ErrNotFound: no session with that id.
	ErrNotFound = errors.New("kernel: no such session")
	// ErrBusy: the session is already running.
	ErrBusy = errors.New("kernel: session is running")
	// ErrClosed: the session was closed.
	ErrClosed = errors.New("kernel: session is closed")
	// ErrOpen: the operation needs a closed session (session rm without
	// force).
	ErrOpen = errors.New("kernel: session is open")
	// ErrStopping: the kernel is stopping and starts no run.
	ErrStopping = errors.New("kernel: the kernel is stopping")
	// ErrSubagentApply: a sub-agent's change set was to be applied to the
	// workspace; it reaches it only through its parent (*SubagentApplyError).
	ErrSubagentApply = errors.New("kernel: a sub-agent's change set is not applied to the workspace")
)

// SubagentApplyError refuses applying sub-agent Session's change set to
// the workspace: its changes reach the workspace only through the
// reviewed merge (sessions.merge) into Parent's change set, which a
// person then applies, so that no write of a sub-agent skips that review.
type SubagentApplyError struct {
	Session, Parent string
}

func (e *SubagentApplyError) Error() string {
	return fmt.Sprintf("%v: session %s is a sub-agent of %s; its changes reach the workspace only through a reviewed merge into %s's change set "+
		"(offered when its run ends), then with %s's own: apply %s's change set ('fluffy session close --apply %s'), "+
		"or discard %s's ('fluffy session close %s')",
		ErrSubagentApply, e.Session, e.Parent, e.Parent, e.Parent, e.Parent, e.Parent, e.Session, e.Session)
}

func (e *SubagentApplyError) Unwrap() error { return ErrSubagentApply }

// Revoker forgets what was granted to a session: *policy.Tokens,
// *approval.Grants and *approval.Broker implement it.
type Revoker interface {
	EndSession(session string)
}

// Idler is a Revoker that can also let an open session's resources go
// while the session waits (its plugin servers, say): the kernel calls
// IdleSession when it drops an external session's idle router
// (external.go). What was granted the session stays; what is let go is
// started again at the session's next call.
type Idler interface {
	IdleSession(session string)
}

// ModelOpener opens a model by its "provider/name" string; it returns the
// provider and the model name to send.
type ModelOpener func(ctx context.Context, model string) (llm.Provider, string, error)

// Env is what a session's tools work on.
type Env struct {
	Session   string
	Workspace string
	ChangeSet *changeset.ChangeSet
	// TDD is the session's TDD machine (nil when Options.TDD is nil).
	TDD   *tdd.Session
	Audit AuditLog
	// Provenance says whether the session has read untrusted data and
	// records a tool result that makes it so; the tool router puts it
	// into every operation (docs/provenance.md).
	Provenance *Provenance
	// Narrowing is what a sub-agent was given (its tool set and policy
	// layers: the factory must build no tool outside the set and apply
	// every layer); nil for a top-level session.
	Narrowing *Narrowing
}

// AuditLog is the audit log as the kernel uses it (*audit.Log implements
// it; so does a log the caller opens only while it is being written, so
// that other fluffy commands can write between sessions).
type AuditLog interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
	Flush(ctx context.Context) error
	VerifyAtStart(ctx context.Context) (audit.Report, error)
}

// ToolsFactory builds the tools of one session: the tool router, which
// implements agent.Tools and applies every gate.
type ToolsFactory func(ctx context.Context, env Env) (agent.Tools, error)

// TDDOptions configure the sessions' TDD machines.
type TDDOptions struct {
	Machine *tdd.Machine
	Journal *tdd.Journal
	Mode    tdd.Mode
}

// Options configure a Kernel. DB, Audit, DataDir, Models and Tools are
// required.
type Options struct {
	DB      *store.DB // fluffy.db with the main migrations
	Audit   AuditLog
	DataDir datadir.Dir
	Models  ModelOpener
	Tools   ToolsFactory
	// TDD, when set, gives every session a TDD machine.
	TDD *TDDOptions
	// Approvals answers approval requests (session.approve); nil refuses
	// answers.
	Approvals Answerer
	// Revokers hold what a person granted a session (capability tokens,
	// approvals "for session"): a session that is closed or removed is
	// ended in each at once, so nothing approved for it outlives it.
	Revokers []Revoker
	// Price returns a model's price ("provider/name") for cost accounting
	// and Limits.MaxCost; nil prices every model at zero.
	Price func(model string) llm.Price
	// AutoApply, when set and enabled, applies a session's change set at
	// the end of a run whose criteria hold (autoapply.go).
	AutoApply *AutoApplyOptions
	// OwnFiles names fluffy's own files in a workspace; no apply (by
	// hand, at close or automatic) writes them. nil protects nothing.
	OwnFiles OwnFiles
	// HoldUpper, when set, keeps every sandbox off a change set's upper
	// directory while the kernel writes it (apply, discard, automatic
	// apply): it returns once none has it mounted, asking idle ones to
	// go, with the func that lets them back; another process that holds
	// it is an error (internal/wiring: the sessions' registry of mounted
	// change sets, docs/sandbox.md). nil holds nothing.
	HoldUpper func(ctx context.Context, upper string) (release func(), err error)
	// Limits bound each run of a session.
	Limits agent.Limits
	// Subagents bound the trees of sub-agents; the zero value refuses
	// every spawn.
	Subagents SubagentLimits
	// CheckPolicy judges a sub-agent's own rules (a policy file's text):
	// an error when they do not compile or would loosen anything (an
	// allow rule). nil refuses every sub-agent that brings rules.
	CheckPolicy func(rules []byte) error
	// Reviewer asks the person to review a sub-agent's changes before
	// they are merged into its parent's change set (merge.go); nil
	// merges nothing (they stay in the sub-agent's change set).
	Reviewer Reviewer
	// Instructions is fluffy's own part of the system prompt.
	Instructions string
	// Skills, optional, is the system prompt's list of the skills a
	// session over the workspace sees ("" none), read at every run.
	Skills func(workspace string) string
	// Assistant returns the whole of an assistant session's own part of
	// the system prompt (its instructions and its workspace's files,
	// internal/assistant), read at each run; nil: assistant sessions get
	// Instructions.
	Assistant func(workspace string) (string, error)
	// Publish pushes an event to the clients subscribed to topic (the IPC
	// server's Publish); nil drops events.
	Publish func(topic string, data any)
	// Admit is asked before every new session; an error (wrapping
	// ErrOverloaded) refuses it. nil admits all (MemoryAdmit builds one
	// from kernel.memory_high).
	Admit func() error
	// Tracer traces each run of a session (a turn) and its model calls
	// (nil: none; docs/observability.md).
	Tracer *telemetry.Tracer
	// Metrics counts the turns started and running (nil: none).
	Metrics *telemetry.Metrics
	// External bounds the routers kept for external sessions between
	// their calls (external.go).
	External ExternalLimits
	Logger   *slog.Logger
	Now      func() time.Time
}

// Kernel owns the sessions of one data directory.
type Kernel struct {
	o       Options
	log     *slog.Logger
	mu      sync.Mutex
	running map[string]*run // by session id
	// external holds an external session's router between its calls
	// (external.go), by session id.
	external map[string]*externalTools
	// externalTimer drops idle routers (external.go); nil while none is
	// kept.
	externalTimer *time.Timer
	// idling holds the sessions whose dropped router's resources are
	// being let go, closed when they are (external.go).
	idling map[string]chan struct{}
	// stopping is set by Stop: no run starts after it.
	stopping bool
	markMu   sync.Mutex // one MarkUntrusted at a time (provenance.go)
	started  time.Time
	lock     *lockfile.Lock // the data directory's kernel.lock, nil when another holds it
	tree     lineages       // each session's place in its tree (tree.go)
	bg       sync.WaitGroup // sub-agent runs started in the background
	spawnMu  sync.Mutex     // one Spawn at a time (subagent.go)
}

// run is a session's run in progress.
type run struct {
	em     *emitter
	prov   *Provenance // set once the run has read the session's provenance
	cancel context.CancelFunc
	done   chan struct{}
}

// Start verifies the audit log, records kernel.start, and marks the
// sessions a previous kernel left running as interrupted. On audit damage
// it returns an error wrapping ErrAuditDamaged and the kernel must not
// serve.
func Start(ctx context.Context, o Options) (*Kernel, error) {
	switch {
	case o.DB == nil:
		return nil, errors.New("kernel: Options.DB is required")
	case o.Audit == nil:
		return nil, errors.New("kernel: Options.Audit is required")
	case o.DataDir.Root == "":
		return nil, errors.New("kernel: Options.DataDir is required")
	case o.Models == nil:
		return nil, errors.New("kernel: Options.Models is required")
	case o.Tools == nil:
		return nil, errors.New("kernel: Options.Tools is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.External.Max <= 0 {
		o.External.Max = DefaultExternalMax
	}
	if o.External.Idle <= 0 {
		o.External.Idle = DefaultExternalIdle
	}
	k := &Kernel{o: o, log: o.Logger, running: map[string]*run{}, external: map[string]*externalTools{}, idling: map[string]chan struct{}{}, started: o.Now()}
	k.o.Audit = treeLog{AuditLog: o.Audit, k: k}
	o = k.o
	rep, err := o.Audit.VerifyAtStart(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAuditDamaged, err)
	}
	interrupted, err := k.recover(ctx)
	if err != nil {
		return nil, err
	}
	if err := k.finishApplies(ctx); err != nil {
		return nil, err
	}
	swept := k.sweep()
	if _, err := o.Audit.Append(ctx, audit.Entry{Kind: audit.KindKernelStart, Actor: "kernel", Payload: audit.KernelStart{
		PID: os.Getpid(), InterruptedSessions: interrupted, OrphansRemoved: swept.Count(),
		Verified: audit.Verified{From: rep.From, To: rep.To, Checkpoints: rep.Checkpoints},
	}}); err != nil {
		return nil, fmt.Errorf("kernel: audit kernel.start: %w", err)
	}
	k.log.Info("kernel started", "interrupted_sessions", len(interrupted))
	return k, nil
}

// sweep takes the data directory's kernel lock and removes what dead
// kernels' sandboxes left behind (SweepOrphans). Failures are logged: a
// leftover never stops a start.
func (k *Kernel) sweep() Swept {
	lock, err := lockDataDir(k.o.DataDir)
	if err != nil {
		k.log.Warn("kernel lock", "err", err)
	}
	k.lock = lock
	s, err := SweepOrphans(SweepOptions{DataDir: k.o.DataDir, OwnsDataDir: lock != nil, Before: k.started})
	if err != nil {
		k.log.Warn("orphans of a dead kernel left in place", "err", err)
	}
	if s.Count() > 0 || s.Skipped != "" {
		k.log.Info("orphans of a dead kernel removed", "work_dirs", s.WorkDirs, "cgroups", s.Cgroups, "skipped", s.Skipped)
	}
	return s
}

// recover marks sessions left running by a dead kernel as interrupted:
// paused and resumable, their change sets untouched.
func (k *Kernel) recover(ctx context.Context) ([]string, error) {
	var ids []string
	err := k.o.DB.Tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM sessions WHERE status = 'running'`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE sessions SET status = 'paused', interrupted = 1, stop_reason = 'interrupted',
			error = 'the kernel stopped while the session was running', updated_at = ? WHERE status = 'running'`, k.o.Now().UnixNano())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kernel: recover sessions: %w", err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

// finishApplies finishes or rolls back the applies a dead kernel (or
// CLI) left half done, so that no workspace stays half changed until
// someone happens to open that session's change set again.
func (k *Kernel) finishApplies(ctx context.Context) error {
	var ids []string
	err := k.o.DB.Tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, changeset FROM sessions WHERE status != 'closed' AND changeset != ''`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, dir string
			if err := rows.Scan(&id, &dir); err != nil {
				return err
			}
			if changeset.Interrupted(dir) {
				ids = append(ids, id)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("kernel: find interrupted applies: %w", err)
	}
	for _, id := range ids {
		info, err := k.Get(ctx, id)
		if err != nil {
			return err
		}
		// Opening a change set finishes or rolls back its apply. One that
		// cannot be (its workspace gone, a file in the way) is said and
		// left: every later use of that change set tries again and fails
		// with the reason, and the other sessions need this kernel.
		if _, err := changeset.Open(info.ChangeSet, info.Workspace); err != nil {
			k.log.Error("an apply a crash interrupted could not be finished or rolled back", "session", id, "err", err)
			continue
		}
		k.log.Warn("an apply a crash interrupted was finished or rolled back", "session", id)
	}
	return nil
}

// Stop cancels running sessions (they stay resumable), waits for them up
// to ctx's deadline, and records kernel.stop. A run that has not ended by
// then (a tool stuck in a system call, deaf to its context) is abandoned:
// kernel.stop names its session under "abandoned", the session stays
// "running" in the database, and the next kernel marks it interrupted and
// resumable, as after a crash. It does not close the DB or the audit
// log, which the caller owns.
func (k *Kernel) Stop(ctx context.Context, cause string) error {
	k.mu.Lock()
	k.stopping = true
	if k.externalTimer != nil {
		k.externalTimer.Stop()
		k.externalTimer = nil
	}
	runs := make(map[string]*run, len(k.running))
	for id, r := range k.running {
		r.cancel()
		runs[id] = r
	}
	k.mu.Unlock()
	abandoned := []string{}
	for id, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
		}
		select {
		case <-r.done:
		default:
			abandoned = append(abandoned, id)
		}
	}
	// Sub-agents started in the background either registered their run
	// before stopping was set (cancelled above) or are refused a run now.
	bgDone := make(chan struct{})
	go func() { k.bg.Wait(); close(bgDone) }()
	select {
	case <-bgDone:
	case <-ctx.Done():
	}
	slices.Sort(abandoned)
	if len(abandoned) > 0 {
		k.log.Error("kernel stopping with runs that did not end when cancelled; their sessions stay resumable", "sessions", abandoned)
	}
	// The wait may have used up ctx: the record gets a moment of its own.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	payload := audit.KernelStop{PID: os.Getpid(), Cause: cause, UptimeMS: k.o.Now().Sub(k.started).Milliseconds(), Abandoned: abandoned}
	_, err := k.o.Audit.Append(actx, audit.Entry{Kind: audit.KindKernelStop, Actor: "kernel", Payload: payload})
	if k.lock != nil {
		k.lock.Release()
		k.lock = nil
	}
	return err
}

// newID returns a session id: "s" and 12 hex digits (a valid IPC topic
// segment, so events go to "session.<id>").
func newID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "s" + hex.EncodeToString(b[:]), nil
}

// NoTools is the tool set of a kernel built without a tool router: it
// offers the model no tools and refuses any call it makes anyway, so a
// session can still talk but never acts (fail closed).
type NoTools struct{}

// Definitions lists no tools.
func (NoTools) Definitions() []llm.Tool { return nil }

// Call refuses the call; the model sees the refusal.
func (NoTools) Call(_ context.Context, c llm.ToolCall) (agent.Result, error) {
	return agent.Result{Content: fmt.Sprintf("refused: no tool %q is available in this session (no tool router is configured)", c.Name),
		IsError: true, Decision: "deny: no tool router"}, nil
}
