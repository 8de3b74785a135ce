package kernel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// Type is the kind of a session event. The agent loop's event types pass
// through unchanged; the kernel adds error and done.
type Type string

// Kernel event types (see agent.EventType for the loop's).
const (
	TypeError Type = "error" // Fault: what failed, its class and the fix
	TypeDone  Type = "done"  // Result: how the run ended; the last event of a run
	// TypeApproval: the run waits for a person; Approval is the request
	// and Text its prompt. Answer with session.approve.
	TypeApproval Type = "approval"
	// TypeStats: the session's running totals and TDD state (Stats), at
	// the start of a run and after every model call and tool result —
	// what a status line shows.
	TypeStats Type = "stats"
	// TypeWarning: something the person should know that does not stop
	// the run (Text), such as an edit of a policy file that did not load.
	TypeWarning Type = "warning"
)

// Event is one thing that happened in a session, pushed to attached
// clients on topic Topic(session).
type Event struct {
	Session string       `json:"session"`
	Seq     uint64       `json:"seq"` // per run, from 1
	Type    Type         `json:"type"`
	Agent   *agent.Event `json:"agent,omitempty"`
	Fault   *Fault       `json:"fault,omitempty"`
	Result  *RunResult   `json:"result,omitempty"`
	// Approval and Text describe a TypeApproval event; Text alone a
	// TypeWarning event.
	Approval *approval.Request `json:"approval,omitempty"`
	Text     string            `json:"text,omitempty"`
	Stats    *Stats            `json:"stats,omitempty"`
}

// Topic is the IPC topic of a session's events.
func Topic(session string) string { return "session." + session }

// FaultClass routes an error.
type FaultClass string

// Fault classes. Tool errors have no class here: a refused or failed tool
// call is a result the model sees and acts on, and the run continues.
const (
	// FaultModel: the model provider failed after its retries; the
	// session is paused and resumable.
	FaultModel FaultClass = "model"
	// FaultRuntime: fluffy itself could not go on (the router could not
	// process a call, the audit log or the database failed, a bug); the
	// session fails closed.
	FaultRuntime FaultClass = "runtime"
)

// Fault is an error as a user reads it: what failed, and what to do.
type Fault struct {
	Class   FaultClass `json:"class"`
	Message string     `json:"message"`
	Fix     string     `json:"fix,omitempty"`
}

// classify routes an error returned by the agent loop.
func classify(err error) *Fault {
	if errors.Is(err, agent.ErrRuntime) {
		return &Fault{Class: FaultRuntime, Message: err.Error(),
			Fix: "the tool runtime failed and the session stopped (fail closed); check kernel.log and fluffy doctor, then close the session"}
	}
	var le *llm.Error
	if errors.As(err, &le) {
		fix := "resume the session when the provider answers again (fluffy session resume)"
		if le.Status == 401 || le.Status == 403 {
			fix = "check the provider's API key (fluffy models), then resume the session"
		}
		return &Fault{Class: FaultModel, Message: err.Error(), Fix: fix}
	}
	// Anything else came out of the provider's stream (the loop wraps tool
	// runtime failures as ErrRuntime): a model error, resumable.
	return &Fault{Class: FaultModel, Message: err.Error(), Fix: "resume the session (fluffy session resume) once the cause is fixed"}
}

// textWindow is how long the emitter joins a turn's text deltas into one
// event.
const textWindow = 25 * time.Millisecond

// emitter numbers a run's events and delivers them, in order. Text deltas
// are joined for up to textWindow: a provider may hand over thousands of
// small deltas at once (a replay script, a fast local model), and each
// event is a frame in every attached client's queue, which is bounded —
// a burst would get the client dropped as a slow consumer. Any other
// event first delivers the text held, so order is kept.
type emitter struct {
	k   *Kernel
	id  string
	on  func(Event)
	seq atomic.Uint64

	mu      sync.Mutex // guards the fields below; held while delivering
	text    *Event     // text held back, nil when none
	timer   *time.Timer
	stopped bool // an agent stop event was delivered
}

// endRun delivers the run's done event, preceded by a stop event when the
// agent sent none (a run cancelled before or while it was set up): every
// run's events end with stop, then done, whatever ended it. info holds
// the session's totals before the run.
func (e *emitter) endRun(res *RunResult, info Info) {
	e.mu.Lock()
	stopped := e.stopped
	e.mu.Unlock()
	if !stopped {
		e.emit(Event{Type: Type(agent.EventStop), Agent: &agent.Event{Type: agent.EventStop, Turn: info.Turns,
			Reason: agent.Reason(res.Reason), Usage: info.Usage, Cost: info.Cost}})
	}
	e.emit(Event{Type: TypeDone, Result: res})
}

func (e *emitter) emit(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Type == Type(agent.EventText) && ev.Agent != nil {
		if e.text != nil && e.text.Agent.Turn == ev.Agent.Turn {
			e.text.Agent.Text += ev.Agent.Text
			return
		}
		e.flushLocked()
		a := *ev.Agent
		ev.Agent = &a
		e.text = &ev
		e.timer = time.AfterFunc(textWindow, func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.flushLocked()
		})
		return
	}
	e.flushLocked()
	e.deliverLocked(ev)
}

func (e *emitter) flushLocked() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if e.text == nil {
		return
	}
	ev := *e.text
	e.text = nil
	e.deliverLocked(ev)
}

func (e *emitter) deliverLocked(ev Event) {
	if ev.Type == Type(agent.EventStop) {
		e.stopped = true
	}
	ev.Session, ev.Seq = e.id, e.seq.Add(1)
	if e.on != nil {
		e.on(ev)
	}
	if e.k.o.Publish != nil {
		e.k.o.Publish(Topic(e.id), ev)
	}
}

// Notify implements approval.Notifier: the request goes to the session's
// attached clients as a TypeApproval event. A sub-agent's request goes
// to the clients of every running session up its tree as well, so the
// person who runs the parent is asked (docs/subagents.md). The answer
// comes back through session.approve (Answer).
func (k *Kernel) Notify(ctx context.Context, req approval.Request) error {
	ids := []string{req.Session}
	for cur := req.Session; len(ids) <= maxTreeWalk; {
		l, ok := k.tree.get(cur)
		if !ok {
			info, err := k.Get(ctx, cur)
			if err != nil {
				break
			}
			l = lineage{parent: info.Parent, root: info.Root}
			k.tree.put(cur, l)
		}
		if l.parent == "" {
			break
		}
		ids = append(ids, l.parent)
		cur = l.parent
	}
	var ems []*emitter
	k.mu.Lock()
	for _, id := range ids {
		if r := k.running[id]; r != nil && r.em != nil {
			ems = append(ems, r.em)
		}
	}
	k.mu.Unlock()
	if len(ems) == 0 {
		return fmt.Errorf("kernel: session %s is not running: nobody to ask", req.Session)
	}
	text := req.Prompt()
	for _, em := range ems {
		t := text
		if em.id != req.Session {
			t = "sub-agent " + req.Session + " asks: " + text
		}
		em.emit(Event{Type: TypeApproval, Approval: &req, Text: t})
	}
	return nil
}

// maxTreeWalk bounds a walk up a tree (the configured depth is far below).
const maxTreeWalk = 64

// Warn shows text to the attached clients of session as a TypeWarning
// event of its current run. It reports false when the session is not
// running: there is no run to tell.
func (k *Kernel) Warn(session, text string) bool {
	k.mu.Lock()
	r := k.running[session]
	k.mu.Unlock()
	if r == nil || r.em == nil {
		return false
	}
	r.em.emit(Event{Type: TypeWarning, Text: text})
	return true
}

// Answerer takes a person's answer to an approval request
// (*approval.Broker implements it).
type Answerer interface {
	Answer(ctx context.Context, id, text string, who approval.Who) error
}
