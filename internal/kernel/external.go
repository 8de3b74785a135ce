package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// An external session is driven by an agent outside fluffy (an MCP client
// of "fluffy mcp serve", docs/mcp-serve.md): the client proposes each tool
// call and fluffy runs no model for it. Each call takes the session's tool
// router like a call of fluffy's own agent loop: state gate, policy,
// approval, sandbox, sanitize, audit, with the session's change set and
// TDD machine.

// ModelExternal is the model of a session an outside agent drives; such a
// session has no model to run (Run refuses it with ErrExternal).
const ModelExternal = "external/mcp"

// ErrExternal: the session is driven by an outside agent, which calls its
// tools one by one; it has no agent loop to run or resume.
var ErrExternal = errors.New("kernel: the session is driven by an outside agent (fluffy mcp serve); it has no model to run")

// ErrNotExternal: a session with its own agent loop has no tool calls
// from outside; only its model proposes them.
var ErrNotExternal = errors.New("kernel: the session runs its own model: its tools are called by its agent loop only")

// IPC methods of external sessions.
const (
	// MethodTools lists the tools of a session's router (IDParams →
	// []llm.Tool).
	MethodTools = "session.tools"
	// MethodCall runs one tool call through a session's router
	// (CallParams → agent.Result). A refusal (state gate, policy,
	// denied approval) or a failed command is a result with IsError, as
	// the model would see it; the error is for calls that cannot run at
	// all (unknown or closed session, one already running).
	MethodCall = "session.call"
)

// CallParams name a session and one tool call.
type CallParams struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Tools returns the definitions of session id's tools.
func (k *Kernel) Tools(ctx context.Context, id string) ([]llm.Tool, error) {
	var defs []llm.Tool
	err := k.withTools(ctx, id, func(ctx context.Context, t agent.Tools) error {
		defs = t.Definitions()
		return nil
	})
	return defs, err
}

// CallTool runs one tool call of an outside agent through session id's
// router. While it runs the session counts as running: approval requests
// are published on its topic, Cancel ends the call, Close and Run refuse
// (ErrBusy), and so does a second call at the same time.
func (k *Kernel) CallTool(ctx context.Context, id string, call llm.ToolCall) (agent.Result, error) {
	var res agent.Result
	err := k.withTools(ctx, id, func(ctx context.Context, t agent.Tools) error {
		var err error
		res, err = t.Call(ctx, call)
		return err
	})
	if err != nil {
		return agent.Result{}, err
	}
	return res, nil
}

// externalTools is an external session's router, kept between its calls
// as a run keeps its router between turns: building one per call would
// cost more than a call (the TDD machine resumed from its journal, the
// session's sandbox and policy looked up). It is dropped when what it
// was built on changes outside its calls: the change set or the TDD
// mode (reserveChanges), the provenance (markUntrusted), the session's
// end (revoke).
type externalTools struct {
	tools agent.Tools
	prov  *Provenance
	// used is when its last call ended.
	used time.Time
}

// ExternalLimits bound the routers kept for external sessions: a
// session an MCP client left open for review keeps its change set, but
// not its router (nor, through Idler, its plugin servers) forever. A
// dropped router is built again at the session's next call.
type ExternalLimits struct {
	// Max routers kept; the least recently used beyond it is dropped.
	// Default DefaultExternalMax.
	Max int
	// Idle drops a router no call has used for this long. Default
	// DefaultExternalIdle.
	Idle time.Duration
}

// The defaults of ExternalLimits.
const (
	DefaultExternalMax  = 16
	DefaultExternalIdle = 10 * time.Minute
)

// dropExternal forgets session id's router.
func (k *Kernel) dropExternal(id string) {
	k.mu.Lock()
	delete(k.external, id)
	k.mu.Unlock()
}

// keepExternal keeps x as session id's router, used now, and drops the
// routers of other sessions beyond ExternalLimits (never one in a
// call); their sessions' idle resources are let go (Idler) in the
// background, not on this call's time.
func (k *Kernel) keepExternal(id string, x *externalTools) {
	k.mu.Lock()
	x.used = k.o.Now()
	k.external[id] = x
	dropped := k.evictExternalLocked(id)
	k.armExternalLocked()
	if len(dropped) > 0 {
		k.bg.Add(1)
	}
	k.mu.Unlock()
	if len(dropped) > 0 {
		go func() {
			defer k.bg.Done()
			k.idle(dropped)
		}()
	}
}

// SweepExternal drops the routers idle for longer than
// ExternalLimits.Idle; the kernel's timer calls it.
func (k *Kernel) SweepExternal() {
	k.mu.Lock()
	dropped := k.evictExternalLocked("")
	k.externalTimer = nil
	k.armExternalLocked()
	k.mu.Unlock()
	k.idle(dropped)
}

// evictExternalLocked drops, but for keep's and those in a call, the
// routers idle beyond the limit, then the least recently used beyond
// the count; it returns their sessions, each marked idling until idle
// has let its resources go. k.mu is held.
func (k *Kernel) evictExternalLocked(keep string) []string {
	now, lim := k.o.Now(), k.o.External
	var dropped []string
	cands := make([]string, 0, len(k.external))
	for id, x := range k.external {
		if _, busy := k.running[id]; busy || id == keep {
			continue
		}
		if now.Sub(x.used) >= lim.Idle {
			delete(k.external, id)
			dropped = append(dropped, id)
			continue
		}
		cands = append(cands, id)
	}
	slices.SortFunc(cands, func(a, b string) int { return k.external[a].used.Compare(k.external[b].used) })
	for _, id := range cands {
		if len(k.external) <= lim.Max {
			break
		}
		delete(k.external, id)
		dropped = append(dropped, id)
	}
	for _, id := range dropped {
		if k.idling[id] == nil {
			k.idling[id] = make(chan struct{})
		}
	}
	return dropped
}

// waitIdled waits until session id's resources, let go when its router
// was dropped, are gone, so that a router built now does not have its
// new ones let go too.
func (k *Kernel) waitIdled(ctx context.Context, id string) error {
	k.mu.Lock()
	ch := k.idling[id]
	k.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// armExternalLocked starts the timer of the next idle sweep while
// routers are kept and the kernel runs. k.mu is held.
func (k *Kernel) armExternalLocked() {
	if k.externalTimer != nil || k.stopping || len(k.external) == 0 {
		return
	}
	k.externalTimer = time.AfterFunc(k.o.External.Idle, k.SweepExternal)
}

// idle tells the Idlers among the revokers that sessions' routers were
// dropped, and ends their idling.
func (k *Kernel) idle(sessions []string) {
	for _, id := range sessions {
		k.log.Info("an external session's idle router was dropped; its change set stays for review", "session", id)
		for _, r := range k.o.Revokers {
			if i, ok := r.(Idler); ok {
				i.IdleSession(id)
			}
		}
		k.mu.Lock()
		if ch := k.idling[id]; ch != nil {
			close(ch)
			delete(k.idling, id)
		}
		k.mu.Unlock()
	}
}

// withTools registers an external call on session id and calls fn with
// the session's router, built as a run builds it when none is kept. The
// audit entries the call wrote are durable before it returns.
func (k *Kernel) withTools(ctx context.Context, id string, fn func(context.Context, agent.Tools) error) error {
	info, err := k.Get(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case info.Status == StatusClosed:
		return fmt.Errorf("%w: %s", ErrClosed, id)
	case info.Model != ModelExternal:
		return fmt.Errorf("%w: %s", ErrNotExternal, id)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &run{em: &emitter{k: k, id: id}, cancel: cancel, done: make(chan struct{})}
	k.mu.Lock()
	if k.stopping {
		k.mu.Unlock()
		cancel()
		return ErrStopping
	}
	if _, busy := k.running[id]; busy {
		k.mu.Unlock()
		cancel()
		return fmt.Errorf("%w: %s", ErrBusy, id)
	}
	k.running[id] = r
	x := k.external[id]
	if x != nil {
		// A mark while the call runs reaches the router's provenance.
		r.prov = x.prov
	}
	k.mu.Unlock()
	defer func() {
		cancel()
		k.mu.Lock()
		delete(k.running, id)
		k.mu.Unlock()
		close(r.done)
	}()
	if x == nil {
		// A router dropped a moment ago: its resources go first.
		if err := k.waitIdled(ctx, id); err != nil {
			return err
		}
		// The router outlives this call: it is built on a context
		// without the call's cancellation.
		if x, err = k.buildExternal(context.WithoutCancel(ctx), info); err != nil {
			return err
		}
	}
	ferr := fn(ctx, x.tools)
	k.keepExternal(id, x)
	// Fast-path reads buffer their entries: the client hears the result
	// only once its record is durable.
	if err := k.o.Audit.Flush(context.WithoutCancel(ctx)); err != nil {
		return errors.Join(ferr, fmt.Errorf("kernel: flush the audit log: %w", err))
	}
	return ferr
}

// buildExternal builds an external session's router as runSession does.
func (k *Kernel) buildExternal(ctx context.Context, info Info) (*externalTools, error) {
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		return nil, fmt.Errorf("kernel: open the change set: %w", err)
	}
	env := Env{Session: info.ID, Workspace: info.Workspace, ChangeSet: cs, Audit: k.o.Audit, Narrowing: info.Narrowing}
	if env.Provenance, err = k.runProvenance(ctx, info.ID); err != nil {
		return nil, err
	}
	if t := k.o.TDD; t != nil {
		if env.TDD, err = tdd.Resume(ctx, t.Journal, t.Machine, info.ID, t.Mode); err != nil {
			return nil, fmt.Errorf("kernel: TDD machine: %w", err)
		}
	}
	tools, err := k.o.Tools(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("kernel: tool router: %w", err)
	}
	return &externalTools{tools: tools, prov: env.Provenance}, nil
}

// externalHandlers are the IPC handlers of external sessions.
func (k *Kernel) externalHandlers() map[string]ipc.Handler {
	return map[string]ipc.Handler{
		MethodTools: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p IDParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			defs, err := k.Tools(ctx, p.ID)
			return defs, wireError(err)
		},
		MethodCall: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p CallParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			if p.Name == "" {
				return nil, ipc.Errorf(ipc.CodeInvalidParams, "a call needs a tool name")
			}
			if len(p.Args) == 0 {
				p.Args = json.RawMessage(`{}`)
			}
			callID, err := newID()
			if err != nil {
				return nil, err
			}
			res, err := k.CallTool(ctx, p.ID, llm.ToolCall{ID: "ext-" + callID, Name: p.Name, Args: p.Args})
			return res, wireError(err)
		},
	}
}
