package kernel

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// Finishing with tech debt open: when the model stops (the agent's
// "done") while explore mode's tech debt is open, the kernel asks the TDD
// machine to finish the cycle. The machine accepts only when each
// indebted file's coverage, measured after the last change, reaches its
// baseline minus tdd.debt_budget. A refusal goes back to the model as the
// next message, naming the files, at most maxFinishRefusals times in one
// run; after that the run ends with ReasonDebtUnpaid and the person hears
// which files lack tests (no auto-apply: that needs ReasonDone).

// ReasonDebtUnpaid is a run's end reason when the model stopped but the
// TDD machine refused to finish: tech debt unpaid (or not measured since
// the last change).
const ReasonDebtUnpaid agent.Reason = "debt_unpaid"

// maxFinishRefusals bounds how often one run tells the model it may not
// finish yet, so a model that will not write the tests cannot loop.
const maxFinishRefusals = 2

// finishPrefix starts the message that tells the model it may not finish.
const finishPrefix = "fluffy: you cannot finish yet. "

// finisher runs a session's agent to a finish the TDD machine accepts.
// It holds back the agent's "stopped: done" event until the machine has
// decided, so clients never hear "done" for a stop that was refused. It
// is used by the one goroutine that runs the agent (the loop delivers its
// events synchronously).
type finisher struct {
	k    *Kernel
	sess *tdd.Session // nil: no TDD machine, nothing to check
	em   *emitter
	stop *agent.Event // the held stop event
	// stats tells the clients the session's totals again (the TDD
	// state moved).
	stats func()
}

// hold keeps a done stop event back; it reports whether it did.
func (f *finisher) hold(ev agent.Event) bool {
	if f.sess == nil || ev.Reason != agent.ReasonDone {
		return false
	}
	f.stop = &ev
	return true
}

// release delivers the held stop event, with reason r.
func (f *finisher) release(r agent.Reason) {
	if f.stop == nil {
		return
	}
	ev := *f.stop
	f.stop = nil
	ev.Reason = r
	f.em.emit(Event{Type: Type(ev.Type), Agent: &ev})
}

// run runs the agent until it stops; when it stops as done with tech
// debt open and the TDD machine refuses to finish, the refusal is the
// model's next message and the agent runs again (bounded).
func (f *finisher) run(ctx context.Context, a *agent.Agent, st *state, save func()) (agent.Outcome, error) {
	out, err := a.Run(ctx, st.Agent)
	for refusals := 0; err == nil && out.Reason == agent.ReasonDone; refusals++ {
		refusal, ferr := f.finish(ctx)
		if ferr != nil {
			f.stop = nil
			return out, ferr
		}
		if refusal == "" {
			break
		}
		if refusals == maxFinishRefusals {
			f.release(ReasonDebtUnpaid)
			return agent.Outcome{Reason: ReasonDebtUnpaid, Text: "finishing refused: " + refusal}, nil
		}
		f.stop = nil
		addMessage(st, finishPrefix+refusal)
		save()
		out, err = a.Run(ctx, st.Agent)
	}
	f.release(out.Reason)
	return out, err
}

// finish applies the TDD machine's done when tech debt is open. It
// returns the refusal's reason ("" when there was no debt or the machine
// accepted); an error is a journal failure. Either outcome is shown to
// the session's clients as a context line.
func (f *finisher) finish(ctx context.Context) (string, error) {
	if f.sess == nil {
		return "", nil
	}
	debt := f.sess.Status().Debt
	if len(debt) == 0 {
		return "", nil
	}
	paths := make([]string, len(debt))
	for i, d := range debt {
		paths[i] = d.Path
	}
	tr, err := f.sess.Finish(ctx)
	var te *tdd.Error
	if errors.As(err, &te) {
		if err := f.record(ctx, audit.TDDFinish{Code: string(te.Code), Reason: te.Reason, Files: paths}); err != nil {
			return "", err
		}
		f.context(fmt.Sprintf("finishing refused (%s): %s", te.Code, te.Reason))
		f.k.log.InfoContext(ctx, "finish refused", "session", f.sess.ID, "code", te.Code, "reason", te.Reason)
		return fmt.Sprintf("%s (%s)", te.Reason, te.Code), nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: kernel: finish the TDD cycle: %w", agent.ErrRuntime, err)
	}
	if err := f.record(ctx, audit.TDDFinish{Accepted: true, Files: paths}); err != nil {
		return "", err
	}
	f.context(fmt.Sprintf("tech debt paid (%s): tdd %s → %s", strings.Join(paths, ", "), tr.From, tr.To))
	if f.stats != nil {
		f.stats()
	}
	return "", nil
}

// record writes the machine's decision to the audit log, durable before
// the run goes on (a refusal reaches the model, an acceptance lets the run
// end as done and its change set be applied).
func (f *finisher) record(ctx context.Context, p audit.TDDFinish) error {
	if _, err := f.k.o.Audit.Append(ctx, audit.Entry{Session: f.sess.ID, Kind: audit.KindTDDFinish, Actor: "kernel", Payload: p}); err != nil {
		return fmt.Errorf("%w: kernel: audit tdd.finish: %w", agent.ErrRuntime, err)
	}
	if err := f.k.o.Audit.Flush(ctx); err != nil {
		return fmt.Errorf("%w: kernel: audit tdd.finish: %w", agent.ErrRuntime, err)
	}
	return nil
}

func (f *finisher) context(text string) {
	f.em.emit(Event{Type: Type(agent.EventContext), Agent: &agent.Event{Type: agent.EventContext, Text: text}})
}
