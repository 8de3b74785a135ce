package kernel

import (
	"context"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// What an interactive client does between the turns of an open session
// besides running it: switch the TDD mode (session.mode). Applying or
// discarding part of the change set without closing the session goes
// through changeset.apply / changeset.discard (SessionChanges). None of
// them runs while the session runs.
const (
	MethodMode = "session.mode" // ModeParams → ModeResult
)

// RunParams run a session; Message, when set, is the user's next
// message (a new turn of the conversation).
type RunParams struct {
	ID      string `json:"id"`
	Message string `json:"message,omitempty"`
}

// DiffParams select a session's changes; no paths means all.
type DiffParams struct {
	ID    string   `json:"id"`
	Paths []string `json:"paths,omitempty"`
}

// ModeParams switch a session's TDD mode: the user's decision.
type ModeParams struct {
	ID     string `json:"id"`
	Mode   string `json:"mode"`
	Reason string `json:"reason,omitempty"`
	Name   string `json:"name,omitempty"` // who asks (default: the peer's uid)
}

// ModeResult is a mode switch as recorded.
type ModeResult struct {
	From     tdd.Mode  `json:"from"`
	To       tdd.Mode  `json:"to"`
	State    tdd.State `json:"state"`
	Reverted []string  `json:"reverted,omitempty"`
}

// Stats are a session's running totals, as a status line shows them.
type Stats struct {
	Model string    `json:"model"`
	Turns int       `json:"turns"`
	Usage llm.Usage `json:"usage"`
	Cost  float64   `json:"cost"`
	// TDD and Mode are the TDD machine's state and mode (empty without
	// one).
	TDD  string `json:"tdd,omitempty"`
	Mode string `json:"mode,omitempty"`
}

func statsOf(model string, s *agent.Session, t *tdd.Session) *Stats {
	st := &Stats{Model: model, Turns: s.Turns, Usage: s.Usage, Cost: s.Cost}
	if t != nil {
		ts := t.Status()
		st.TDD, st.Mode = string(ts.State), string(ts.Mode)
	}
	return st
}

// addMessage adds the user's next message to the conversation; after an
// interrupted turn the tool results already form a user message, which
// the text joins.
func addMessage(st *state, text string) {
	msgs := st.Agent.Messages
	if n := len(msgs); n > 0 && msgs[n-1].Role == llm.RoleUser {
		msgs[n-1].Content = append(msgs[n-1].Content, llm.Text(text))
		return
	}
	st.Agent.Messages = append(msgs, llm.Message{Role: llm.RoleUser, Content: []llm.Block{llm.Text(text)}})
}

// hold reserves an open session that is not running, so no run starts
// while the caller changes its change set or TDD machine.
func (k *Kernel) hold(ctx context.Context, id string) (Info, func(), error) {
	info, err := k.Get(ctx, id)
	if err != nil {
		return Info{}, nil, err
	}
	switch info.Status {
	case StatusClosed:
		return Info{}, nil, fmt.Errorf("%w: %s", ErrClosed, id)
	case StatusRunning:
		return Info{}, nil, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	release, err := k.reserveChanges(id)
	if err != nil {
		return Info{}, nil, err
	}
	return info, release, nil
}

// Apply writes the changes at or below paths (all when none) to the
// workspace, all or nothing, and keeps the session open: what was applied
// leaves the change set, the rest stays pending. It is changeset.apply
// (SessionChanges.Apply) for one session; a conflict returns the
// *changeset.ConflictError and applies nothing.
func (k *Kernel) Apply(ctx context.Context, id string, paths ...string) ([]changeset.Change, error) {
	res, err := k.changes().Apply(ctx, ChangesParams{Session: id, Paths: paths})
	if err != nil {
		return nil, err
	}
	if err := res.Refused(); err != nil {
		return nil, err
	}
	return res.Changes, nil
}

// Discard drops the changes at or below paths (all when none) from the
// change set and keeps the session open (SessionChanges.Discard); it
// returns how many changes were dropped.
func (k *Kernel) Discard(ctx context.Context, id string, paths ...string) (int, error) {
	res, err := k.changes().Discard(ctx, ChangesParams{Session: id, Paths: paths})
	return len(res.Changes), err
}

// SwitchMode switches the session's TDD mode; only a person may (who).
// Leaving debug mode reverts the instrumentation files.
func (k *Kernel) SwitchMode(ctx context.Context, p ModeParams) (ModeResult, error) {
	t := k.o.TDD
	if t == nil {
		return ModeResult{}, fmt.Errorf("kernel: this kernel runs no TDD machine")
	}
	to, err := tdd.ParseMode(p.Mode)
	if err != nil {
		return ModeResult{}, err
	}
	_, release, err := k.hold(ctx, p.ID)
	if err != nil {
		return ModeResult{}, err
	}
	defer release()
	sess, err := tdd.Resume(ctx, t.Journal, t.Machine, p.ID, t.Mode)
	if err != nil {
		return ModeResult{}, err
	}
	tr, err := sess.SwitchMode(ctx, to, tdd.Actor{Kind: tdd.ActorUser, ID: p.Name, Via: "session"}, p.Reason)
	if err != nil {
		return ModeResult{}, err
	}
	res := ModeResult{From: tr.ModeSwitch.From, To: tr.ModeSwitch.To, State: tr.To}
	var revertErr error
	if tr.ModeSwitch.From == tdd.Debug || len(tr.Revert) > 0 {
		res.Reverted, revertErr = sess.RevertInstrumentation(ctx)
	}
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: p.ID, Kind: audit.KindTDDMode, Actor: "user", Payload: audit.TDDMode{
		From: string(res.From), To: string(res.To), State: string(res.State), By: p.Name, Reason: p.Reason, Reverted: res.Reverted}}); err != nil {
		return res, fmt.Errorf("kernel: audit tdd.mode: %w", err)
	}
	if revertErr != nil {
		return res, fmt.Errorf("kernel: mode switched, but some instrumentation files could not be reverted (switching again retries): %w", revertErr)
	}
	return res, k.o.Audit.Flush(ctx)
}

func (k *Kernel) controlHandlers() map[string]ipc.Handler {
	return map[string]ipc.Handler{
		MethodMode: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p ModeParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			if p.Name == "" {
				p.Name = fmt.Sprintf("uid:%d", r.Peer.Cred.UID)
			}
			res, err := k.SwitchMode(ctx, p)
			if err == nil {
				return res, nil
			}
			if w := wireError(err); w != err {
				return nil, w
			}
			// A bad mode name, a switch the machine refuses.
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "%v", err)
		},
	}
}
