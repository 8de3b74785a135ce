package kernel

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Status is a session's life-cycle state, as stored.
type Status string

// Statuses. A paused session is resumable; Interrupted in Info tells
// whether a crash paused it.
const (
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusClosed  Status = "closed"
	StatusFailed  Status = "failed"
)

// Info describes a session.
type Info struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Workspace string    `json:"workspace"`
	// Kind is "coding" or "assistant" (CreateParams.Kind).
	Kind        string    `json:"kind,omitempty"`
	Model       string    `json:"model"`
	Task        string    `json:"task"`
	Status      Status    `json:"status"`
	StopReason  string    `json:"stop_reason,omitempty"`
	Error       string    `json:"error,omitempty"`
	Interrupted bool      `json:"interrupted,omitempty"`
	ChangeSet   string    `json:"changeset"`
	Turns       int       `json:"turns"`
	Usage       llm.Usage `json:"usage"`
	Cost        float64   `json:"cost,omitempty"`
	// Untrusted says what first made the session untrusted (it read
	// data no principal wrote, docs/provenance.md); "" while it has not.
	Untrusted string `json:"untrusted,omitempty"`
	// Parent and Root place a sub-agent in its tree (the session that
	// spawned it, the top of the tree), Depth from 0 at the top;
	// Narrowing is what it was given (docs/subagents.md). All empty for
	// a top-level session.
	Parent    string     `json:"parent,omitempty"`
	Root      string     `json:"root,omitempty"`
	Depth     int        `json:"depth,omitempty"`
	Narrowing *Narrowing `json:"narrowing,omitempty"`
}

// Resumable reports whether Run may continue the session.
func (i Info) Resumable() bool { return i.Status == StatusPaused }

// The kinds of session.
const (
	KindCoding    = "coding"
	KindAssistant = "assistant"
)

// CreateParams are a new session's inputs.
type CreateParams struct {
	Workspace string `json:"workspace"` // absolute path of the repository
	Task      string `json:"task"`
	Model     string `json:"model"`
	// Kind is "coding" (default: a person's session over a project) or
	// "assistant" (a session the assistant daemon started for a
	// conversation, on its workspace).
	Kind string `json:"kind,omitempty"`
}

// state is the persisted part of a session's run: the conversation and
// the results already produced in the current turn.
type state struct {
	Agent   *agent.Session `json:"agent"`
	Results []savedResult  `json:"results,omitempty"`
}

type savedResult struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// Create starts a session: a change set over the workspace, a TDD
// machine, a row in fluffy.db. The session is paused until Run.
func (k *Kernel) Create(ctx context.Context, p CreateParams) (Info, error) {
	return k.create(ctx, p, nil)
}

// create is Create, for a sub-agent when sp is set.
func (k *Kernel) create(ctx context.Context, p CreateParams, sp *spawned) (Info, error) {
	if p.Task == "" {
		return Info{}, errors.New("kernel: a session needs a task")
	}
	if !filepath.IsAbs(p.Workspace) {
		return Info{}, fmt.Errorf("kernel: workspace %q is not an absolute path", p.Workspace)
	}
	if p.Model == "" {
		return Info{}, errors.New("kernel: a session needs a model")
	}
	switch p.Kind {
	case "":
		p.Kind = KindCoding
	case KindCoding, KindAssistant:
	default:
		return Info{}, fmt.Errorf("kernel: unknown session kind %q", p.Kind)
	}
	if k.o.Admit != nil {
		if err := k.o.Admit(); err != nil {
			return Info{}, err
		}
	}
	id, err := newID()
	if err != nil {
		return Info{}, err
	}
	dir := k.o.DataDir.Path(datadir.Changesets, id)
	if _, err := changeset.Begin(ctx, p.Workspace, dir); err != nil {
		return Info{}, fmt.Errorf("kernel: change set for %s: %w", p.Workspace, err)
	}
	st, err := json.Marshal(state{Agent: agent.NewSession(p.Task)})
	if err != nil {
		return Info{}, err
	}
	now := k.o.Now()
	if err := k.o.DB.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, created_at, updated_at, kind, workspace, model, status, task, changeset, state)
		VALUES (?, ?, ?, ?, ?, ?, 'paused', ?, ?, ?)`, id, now.UnixNano(), now.UnixNano(), p.Kind, p.Workspace, p.Model, p.Task, dir, string(st)); err != nil {
			return err
		}
		if sp != nil {
			return insertTree(ctx, tx, id, sp)
		}
		return nil
	}); err != nil {
		return Info{}, fmt.Errorf("kernel: store session: %w", err)
	}
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: id, Kind: audit.KindSessionCreate, Actor: "kernel", Payload: audit.SessionCreate{
		Workspace: p.Workspace, Model: p.Model, Task: p.Task, ChangeSet: dir,
	}}); err != nil {
		return Info{}, fmt.Errorf("kernel: audit session.create: %w", err)
	}
	if sp != nil {
		rec := sp.record()
		rec.Task = p.Task
		if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: id, Kind: audit.KindSessionSpawn, Actor: "kernel", Payload: rec}); err != nil {
			return Info{}, fmt.Errorf("kernel: audit session.spawn: %w", err)
		}
		if t := inheritedTaint(sp.parent); t != "" {
			if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: id, Kind: audit.KindSessionUntrusted, Actor: "kernel",
				Payload: audit.SessionUntrusted{Cause: TaintParent, Source: t}}); err != nil {
				return Info{}, fmt.Errorf("kernel: audit session.untrusted: %w", err)
			}
		}
	}
	return k.Get(ctx, id)
}

const selectInfo = `SELECT id, created_at, updated_at, workspace, model, task, status, stop_reason, error, interrupted, changeset, state, untrusted, kind,
	parent, root, depth, narrowing FROM sessions`

func scanInfo(sc interface{ Scan(...any) error }) (Info, error) {
	var (
		i        Info
		c, u     int64
		intr     int
		stateStr string
		narrow   string
	)
	if err := sc.Scan(&i.ID, &c, &u, &i.Workspace, &i.Model, &i.Task, &i.Status, &i.StopReason, &i.Error, &intr, &i.ChangeSet, &stateStr, &i.Untrusted, &i.Kind,
		&i.Parent, &i.Root, &i.Depth, &narrow); err != nil {
		return Info{}, err
	}
	var err error
	if i.Narrowing, err = readNarrowing(narrow); err != nil {
		return Info{}, fmt.Errorf("kernel: session %s: %w", i.ID, err)
	}
	i.CreatedAt, i.UpdatedAt, i.Interrupted = time.Unix(0, c).UTC(), time.Unix(0, u).UTC(), intr == 1
	var st state
	if err := json.Unmarshal([]byte(stateStr), &st); err == nil && st.Agent != nil {
		i.Turns, i.Usage, i.Cost = st.Agent.Turns, st.Agent.Usage, st.Agent.Cost
	}
	return i, nil
}

// Get returns one session.
func (k *Kernel) Get(ctx context.Context, id string) (Info, error) {
	i, err := scanInfo(k.o.DB.QueryRowContext(ctx, selectInfo+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return i, err
}

// List returns the sessions, newest first; closed ones only when all.
func (k *Kernel) List(ctx context.Context, all bool) ([]Info, error) {
	q := selectInfo + ` WHERE status != 'closed' ORDER BY created_at DESC`
	if all {
		q = selectInfo + ` ORDER BY created_at DESC`
	}
	return k.queryInfos(ctx, q)
}

// queryInfos runs q (selectInfo with its conditions) and scans each row.
func (k *Kernel) queryInfos(ctx context.Context, q string, args ...any) ([]Info, error) {
	rows, err := k.o.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Info{}
	for rows.Next() {
		i, err := scanInfo(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, rows.Err()
}

func (k *Kernel) loadState(ctx context.Context, id string) (*state, error) {
	var s string
	if err := k.o.DB.QueryRowContext(ctx, `SELECT state FROM sessions WHERE id = ?`, id).Scan(&s); err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal([]byte(s), &st); err != nil || st.Agent == nil || len(st.Agent.Messages) == 0 {
		return nil, fmt.Errorf("kernel: session %s: stored state is unreadable", id)
	}
	return &st, nil
}

func (k *Kernel) saveState(ctx context.Context, id string, st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = k.o.DB.ExecContext(ctx, `UPDATE sessions SET state = ?, updated_at = ? WHERE id = ?`, string(b), k.o.Now().UnixNano(), id)
	return err
}

func (k *Kernel) setStatus(ctx context.Context, id string, s Status, reason, msg string) error {
	_, err := k.o.DB.ExecContext(ctx, `UPDATE sessions SET status = ?, stop_reason = ?, error = ?, interrupted = 0, updated_at = ? WHERE id = ?`,
		string(s), reason, msg, k.o.Now().UnixNano(), id)
	return err
}

// RunResult is how a Run ended.
type RunResult struct {
	Session string `json:"session"`
	Status  Status `json:"status"`
	Reason  string `json:"reason"`
	Text    string `json:"text,omitempty"`
	Fault   *Fault `json:"fault,omitempty"`
	// AutoApply is the auto-apply evaluation at the end of the run (nil:
	// off, or nothing to apply).
	AutoApply *AutoApplyReport `json:"auto_apply,omitempty"`
	// Merge is what became of a sub-agent's changes after a run its
	// parent waited for (nil: none, or not a sub-agent's run).
	Merge *Merge `json:"merge,omitempty"`
}

// Run runs (or resumes) a session until the model stops, a limit is hit,
// ctx ends (the session stays resumable) or a fault stops it. Events go to
// Options.Publish on topic Topic(id) and to onEvent, if not nil. A model
// error or runtime fault is reported in RunResult.Fault, not as an error;
// the error is for sessions that cannot run at all (unknown, closed, busy).
func (k *Kernel) Run(ctx context.Context, id string, onEvent func(Event)) (RunResult, error) {
	return k.RunMessage(ctx, id, "", onEvent)
}

// RunMessage is Run with the user's next message: a session's next turn
// in an interactive conversation. An empty message only resumes.
func (k *Kernel) RunMessage(ctx context.Context, id, message string, onEvent func(Event)) (RunResult, error) {
	return k.runMessage(ctx, id, message, onEvent, nil)
}

// runMessage is RunMessage; registered, when set, is called once the run
// is registered (Cancel, Stop and WaitChild find it from then on).
func (k *Kernel) runMessage(ctx context.Context, id, message string, onEvent func(Event), registered func()) (RunResult, error) {
	info, err := k.Get(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return cancelledBeforeRun(Info{ID: id}, &emitter{k: k, id: id, on: onEvent}), nil
		}
		return RunResult{}, err
	}
	switch info.Status {
	case StatusClosed:
		return RunResult{}, fmt.Errorf("%w: %s", ErrClosed, id)
	case StatusRunning:
		return RunResult{}, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	if info.Model == ModelExternal {
		return RunResult{}, fmt.Errorf("%w: %s", ErrExternal, id)
	}
	ctx, cancel := context.WithCancel(ctx)
	em := &emitter{k: k, id: id, on: onEvent}
	r := &run{em: em, cancel: cancel, done: make(chan struct{})}
	k.mu.Lock()
	if k.stopping {
		k.mu.Unlock()
		cancel()
		return RunResult{}, ErrStopping
	}
	if _, busy := k.running[id]; busy {
		k.mu.Unlock()
		cancel()
		return RunResult{}, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	k.running[id] = r
	k.mu.Unlock()
	if registered != nil {
		registered()
	}
	defer func() {
		cancel()
		k.mu.Lock()
		delete(k.running, id)
		k.mu.Unlock()
		close(r.done)
	}()
	if err := k.setStatus(ctx, id, StatusRunning, "", ""); err != nil {
		if ctx.Err() != nil {
			return cancelledBeforeRun(info, em), nil
		}
		return RunResult{}, err
	}
	res := k.runSession(ctx, info, em, message)
	// Persist the end even when ctx was cancelled.
	sctx := context.WithoutCancel(ctx)
	status := StatusPaused
	msg := ""
	if res.Fault != nil {
		msg = res.Fault.Message
		if res.Fault.Class == FaultRuntime {
			status = StatusFailed
		}
	}
	res.Session, res.Status = id, status
	if err := k.setStatus(sctx, id, status, res.Reason, msg); err != nil {
		k.log.ErrorContext(sctx, "save session status", "session", id, "err", err)
	}
	res.AutoApply = k.autoApply(sctx, info, res, em)
	// A sub-agent's changes are offered for merge while its run is still
	// registered: whoever waits for the run waits for the review too.
	res.Merge = k.mergeAfterRun(ctx, id, status)
	// The run's buffered audit entries (fast-path reads) are durable
	// before the client hears the run ended.
	if err := k.o.Audit.Flush(sctx); err != nil {
		k.log.ErrorContext(sctx, "flush the audit log", "session", id, "err", err)
	}
	em.endRun(&res, info)
	return res, nil
}

// cancelledBeforeRun is the result of a run cancelled (Ctrl-C) before it
// began: nothing ran and the session keeps its status. A cancellation,
// not a failure (the terminal used to show "ipc: internal: context
// canceled" when Ctrl-C came while the session was being marked running).
func cancelledBeforeRun(info Info, em *emitter) RunResult {
	res := RunResult{Reason: string(agent.ReasonCancelled), Session: info.ID, Status: info.Status}
	em.endRun(&res, info)
	return res
}

// runSession runs the agent; it never panics.
func (k *Kernel) runSession(ctx context.Context, info Info, em *emitter, message string) (res RunResult) {
	k.o.Metrics.Add(telemetry.MetricTurns, 1)
	k.o.Metrics.Add(telemetry.MetricTurnsRunning, 1)
	defer k.o.Metrics.Add(telemetry.MetricTurnsRunning, -1)
	ctx, span := k.o.Tracer.Start(ctx, "fluffy.turn", trace.SpanKindInternal, telemetry.KeySession.String(info.ID),
		attribute.String("fluffy.session.kind", string(info.Kind)), telemetry.KeyGenAIRequestModel.String(info.Model))
	defer func() {
		if p := recover(); p != nil {
			k.log.ErrorContext(ctx, "session panicked", "session", info.ID, "panic", p, "stack", string(debug.Stack()))
			res = RunResult{Reason: "fault", Fault: &Fault{Class: FaultRuntime, Message: fmt.Sprintf("internal error: %v", p),
				Fix: "this is a bug in fluffy; the session's change set is intact (see kernel.log)"}}
		}
		span.Set(attribute.String("fluffy.reason", res.Reason))
		if res.Fault != nil {
			span.Fail(errors.New(res.Fault.Message))
		}
		span.End()
	}()
	fault := func(f *Fault) RunResult {
		if ctx.Err() != nil {
			// Cancelled (Ctrl-C) while the session was being set up: the
			// failure is the cancellation's, not a fault of the session.
			return RunResult{Reason: string(agent.ReasonCancelled)}
		}
		em.emit(Event{Type: TypeError, Fault: f})
		return RunResult{Reason: "fault", Fault: f}
	}
	st, err := k.loadState(ctx, info.ID)
	if err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: err.Error(), Fix: "the session cannot be resumed; close it (its change set is kept)"})
	}
	provider, model, err := k.o.Models(ctx, info.Model)
	if err != nil {
		return fault(&Fault{Class: FaultModel, Message: fmt.Sprintf("open model %s: %v", info.Model, err), Fix: "set a valid model (fluffy models lists them) and resume"})
	}
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("open the change set: %v", err), Fix: "check " + info.ChangeSet})
	}
	env := Env{Session: info.ID, Workspace: info.Workspace, ChangeSet: cs, Audit: k.o.Audit, Narrowing: info.Narrowing}
	if env.Provenance, err = k.runProvenance(ctx, info.ID); err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: err.Error()})
	}
	if t := k.o.TDD; t != nil {
		if env.TDD, err = tdd.Resume(ctx, t.Journal, t.Machine, info.ID, t.Mode); err != nil {
			return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("TDD machine: %v", err), Fix: "run 'fluffy tdd status --session " + info.ID + "'"})
		}
	}
	tools, err := k.o.Tools(ctx, env)
	if err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("tool router: %v", err)})
	}
	tddState := ""
	if env.TDD != nil {
		tddState = string(env.TDD.Status().State)
	}
	prompt := agent.PromptOptions{Instructions: k.o.Instructions, ProjectDir: info.Workspace, TDDState: tddState, Tools: tools.Definitions()}
	if info.Kind == KindAssistant && k.o.Assistant != nil {
		// The assistant's workspace files, read at every run so an
		// approved edit counts from the next turn; its AGENTS.md is
		// among them, not a project's.
		if prompt.Instructions, err = k.o.Assistant(info.Workspace); err != nil {
			return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("assistant workspace: %v", err), Fix: "fix the file named and resume"})
		}
		prompt.ProjectDir = ""
	}
	if k.o.Skills != nil {
		if list := k.o.Skills(info.Workspace); list != "" {
			prompt.Instructions = strings.TrimSpace(prompt.Instructions) + "\n\n" + list
		}
	}
	system, err := agent.SystemPrompt(prompt)
	if err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("system prompt: %v", err)})
	}
	completeTurn(st)
	if message != "" {
		addMessage(st, message)
	}
	stats := func() { em.emit(Event{Type: TypeStats, Stats: statsOf(info.Model, st.Agent, env.TDD)}) }
	stats()
	// A finished conversation has nothing to resume: the model would be
	// asked to answer its own last message.
	if msgs := st.Agent.Messages; len(msgs) > 1 && msgs[len(msgs)-1].Role == llm.RoleAssistant {
		return RunResult{Reason: string(agent.ReasonDone), Text: lastText(msgs[len(msgs)-1])}
	}
	if f := resumeModel(provider, st); f != nil {
		return fault(f)
	}
	// Persisting happens inside the loop's event callback: at every turn
	// boundary (consistent conversation) and after every tool result (so
	// a result is never produced twice).
	var saveErr atomic.Pointer[error]
	save := func() {
		if err := k.saveState(context.WithoutCancel(ctx), info.ID, st); err != nil {
			saveErr.CompareAndSwap(nil, &err)
		}
	}
	fin := &finisher{k: k, sess: env.TDD, em: em, stats: stats}
	var price llm.Price
	if k.o.Price != nil {
		price = k.o.Price(info.Model)
	}
	providerName, _, _ := strings.Cut(info.Model, "/")
	a, err := agent.New(agent.Options{Provider: provider, Model: model, Tools: tools, System: system, Limits: k.limitsOf(ctx, info), Price: price,
		Handed: k.handedFunc(ctx, info.ID), Tracer: k.o.Tracer, ProviderName: providerName,
		Logger: k.log.With("session", info.ID), OnEvent: func(ev agent.Event) {
			switch ev.Type {
			case agent.EventTurnStart:
				st.Results = nil
				save()
			case agent.EventTurnEnd:
				save()
			case agent.EventToolResult:
				if ev.Call != nil && ev.Result != nil {
					st.Results = append(st.Results, savedResult{ID: ev.Call.ID, Name: ev.Call.Name, Content: ev.Result.Content, IsError: ev.Result.IsError})
					save()
				}
			case agent.EventStop:
				if fin.hold(ev) {
					return
				}
			}
			em.emit(Event{Type: Type(ev.Type), Agent: &ev})
			if ev.Type == agent.EventTurnStart || ev.Type == agent.EventUsage || ev.Type == agent.EventToolResult {
				stats()
			}
		}})
	if err != nil {
		return fault(&Fault{Class: FaultRuntime, Message: err.Error()})
	}
	out, err := fin.run(ctx, a, st, save)
	st.Results = nil
	save()
	if p := saveErr.Load(); p != nil {
		return fault(&Fault{Class: FaultRuntime, Message: fmt.Sprintf("save the session: %v", *p), Fix: "check the disk holding the data directory"})
	}
	if err != nil {
		return fault(classify(err))
	}
	return RunResult{Reason: string(out.Reason), Text: out.Text}
}

func lastText(m llm.Message) string {
	var t string
	for _, b := range m.Content {
		if b.Type == llm.BlockText {
			t += b.Text
		}
	}
	return t
}

// completeTurn makes a conversation saved in the middle of a turn
// consistent again: every tool call of the last assistant message gets its
// saved result, or, when none was saved, an "interrupted" result — the
// call is never run a second time.
func completeTurn(st *state) {
	msgs := st.Agent.Messages
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != llm.RoleAssistant {
		st.Results = nil
		return
	}
	saved := map[string]savedResult{}
	for _, r := range st.Results {
		saved[r.ID] = r
	}
	var results []llm.Block
	for _, b := range msgs[len(msgs)-1].Content {
		if b.Type != llm.BlockToolCall {
			continue
		}
		if r, ok := saved[b.ID]; ok {
			results = append(results, llm.ToolResult(r.ID, r.Name, r.Content, r.IsError))
			continue
		}
		results = append(results, llm.ToolResult(b.ID, b.Name,
			"interrupted: the kernel stopped while this call was pending; it may or may not have run. Check its effect before calling it again.", true))
	}
	if len(results) > 0 {
		st.Agent.Messages = append(st.Agent.Messages, llm.Message{Role: llm.RoleUser, Content: results})
	}
	st.Results = nil
}

// Cancel stops a running session's current run; it stays resumable.
func (k *Kernel) Cancel(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.running[id]
	if ok {
		r.cancel()
	}
	return ok
}

// CloseParams say what to do with a session's change set.
type CloseParams struct {
	ID string `json:"id"`
	// Apply writes the change set into the workspace; otherwise it is
	// discarded.
	Apply bool `json:"apply"`
}

// CloseResult reports what Close did.
type CloseResult struct {
	Applied   []changeset.Change `json:"applied,omitempty"`
	Discarded bool               `json:"discarded,omitempty"`
}

// Close ends a session, applying or discarding its change set. A conflict
// (the workspace changed underneath) leaves the session open and returns
// the *changeset.ConflictError.
func (k *Kernel) Close(ctx context.Context, p CloseParams) (CloseResult, error) {
	info, err := k.Get(ctx, p.ID)
	if err != nil {
		return CloseResult{}, err
	}
	switch info.Status {
	case StatusClosed:
		return CloseResult{}, fmt.Errorf("%w: %s", ErrClosed, p.ID)
	case StatusRunning:
		return CloseResult{}, fmt.Errorf("%w: %s", ErrBusy, p.ID)
	}
	if p.Apply && info.Parent != "" {
		return CloseResult{}, &SubagentApplyError{Session: p.ID, Parent: info.Parent}
	}
	// A call of an outside agent (external.go) holds the session without
	// marking it running; its change set is not applied or discarded
	// under it.
	release, err := k.reserveChanges(p.ID)
	if err != nil {
		return CloseResult{}, err
	}
	defer release()
	// Its sub-agents end with it: their change sets are discarded (what
	// was merged into this one through review is here).
	if err := k.closeChildren(ctx, p.ID); err != nil {
		return CloseResult{}, err
	}
	cs, err := openChangeSet(info, k.o.OwnFiles)
	if err != nil {
		return CloseResult{}, fmt.Errorf("kernel: open the change set: %w", err)
	}
	unhold, err := k.holdUpper(ctx, cs)
	if err != nil {
		return CloseResult{}, fmt.Errorf("kernel: the change set: %w", err)
	}
	defer unhold()
	var res CloseResult
	if p.Apply {
		if res.Applied, err = cs.Apply(ctx); err != nil {
			return CloseResult{}, err
		}
		paths := make([]string, len(res.Applied))
		for i, c := range res.Applied {
			paths[i] = c.Path
		}
		if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: p.ID, Kind: audit.KindChangesetApply, Actor: "user", Payload: audit.ChangesetApply{Paths: paths}}); err != nil {
			return res, fmt.Errorf("kernel: audit changeset.apply: %w", err)
		}
	} else {
		if err := cs.Discard(ctx); err != nil {
			return CloseResult{}, err
		}
		res.Discarded = true
	}
	if err := k.setStatus(ctx, p.ID, StatusClosed, info.StopReason, ""); err != nil {
		return res, err
	}
	k.revoke(p.ID)
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: p.ID, Kind: audit.KindSessionClose, Actor: "user", Payload: audit.SessionClose{Applied: len(res.Applied), Discarded: res.Discarded}}); err != nil {
		return res, err
	}
	return res, k.o.Audit.Flush(ctx)
}

// revoke ends session id in every Revoker: its capability tokens no
// longer verify and its approvals "for session" no longer count. They
// live in the kernel's memory only, so a kernel that restarts holds none.
func (k *Kernel) revoke(id string) {
	k.dropExternal(id)
	for _, r := range k.o.Revokers {
		r.EndSession(id)
	}
}

// Diff returns the session's change set as a unified diff and its list
// of changes.
func (k *Kernel) Diff(ctx context.Context, id string, paths ...string) (string, []changeset.Change, error) {
	info, err := k.Get(ctx, id)
	if err != nil {
		return "", nil, err
	}
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		return "", nil, fmt.Errorf("kernel: open the change set: %w", err)
	}
	changes, err := cs.Changes(ctx, paths...)
	if err != nil {
		return "", nil, err
	}
	d, err := cs.Diff(ctx, paths...)
	return d, changes, err
}
