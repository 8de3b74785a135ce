package tdd

import (
	"errors"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Decision is the state gate's answer for one operation. It is data: the
// router enforces it, the audit log records it, and Reason goes to the
// model when Allow is false.
type Decision struct {
	Allow bool  `json:"allow"`
	Code  Code  `json:"code"`
	Mode  Mode  `json:"mode"`
	State State `json:"state"`
	// Next is the state the machine moves to once the operation has
	// run (for writes).
	Next State `json:"next,omitempty"`
	// Reason is one sentence the model can act on.
	Reason string `json:"reason"`
	// Files are the written files, classified.
	Files []File `json:"files,omitempty"`
}

// Allowed answers whether op may run now in a session whose status is s.
// Reads, network, secret and message operations are not the state gate's
// business; commands always run (their test results move the machine, and
// what a command writes comes back as a write event checked by Step);
// writes are judged by the transition they would make. Unknown actions
// and writes without paths are refused: the gate fails closed.
func (m *Machine) Allowed(s Status, op operation.Operation) Decision {
	d := Decision{Mode: s.Mode, State: s.State}
	switch op.Action {
	case operation.Read, operation.Net, operation.Secret, operation.Message:
		d.Allow, d.Code = true, CodeNotGated
		d.Reason = "not a file write: the TDD gate does not restrict it"
		return d
	case operation.Exec:
		d.Allow, d.Code = true, CodeRun
		d.Reason = "commands run in every state; test results move the TDD machine"
		return d
	case operation.Write:
	default:
		d.Code = CodeBadEvent
		d.Reason = "unknown action " + string(op.Action) + ": refused"
		return d
	}
	if len(op.Paths) == 0 {
		d.Code = CodeNoPaths
		d.Reason = "a write must name the files it changes"
		return d
	}
	ev := m.WriteEvent(&s, op)
	d.Files = ev.Files
	if s.Seq == 0 {
		// A session whose journal has not started is judged in its
		// configured mode from idle; the caller starts the journal.
		s.Seq = 1
	}
	t, err := Step(s, ev)
	if err != nil {
		var te *Error
		if !errors.As(err, &te) {
			d.Code, d.Reason = CodeBadEvent, err.Error()
			return d
		}
		d.Code, d.Reason = te.Code, te.Reason
		if te.Code == CodeNeedFailingTest {
			for _, f := range ev.Files {
				if f.Class == ClassSource {
					d.Reason = "write a failing test first: test files here match " + m.TestHint(f.Path)
					break
				}
			}
		}
		return d
	}
	d.Allow, d.Code, d.Next = true, t.Code, t.To
	d.Reason = reasonFor(t)
	return d
}

func reasonFor(t Transition) string {
	if len(t.Notes) > 0 {
		return t.Notes[0]
	}
	switch t.Code {
	case CodeOutside:
		return "outside the workspace: the TDD gate leaves it to the policy engine"
	case CodeExempt:
		return "documentation, configuration or generated file: exempt from the TDD gate"
	case CodeInstrumentation:
		return "declared instrumentation file: allowed in debug mode, reverted at the end"
	case CodeTestWrite:
		return "test file: allowed"
	case CodeSourceWrite:
		return "source change allowed: a failing test was observed in this cycle"
	}
	return "allowed"
}

// WriteEvent classifies op's paths into the write event Step takes.
func (m *Machine) WriteEvent(s *Status, op operation.Operation) Event {
	ev := Event{Kind: EventWrite}
	for _, p := range op.Paths {
		ev.Files = append(ev.Files, m.Classify(s, op.Session.Workspace, p))
	}
	return ev
}

// DoneEvent is the event for "the cycle is finished", carrying the budget
// in force.
func (m *Machine) DoneEvent() Event {
	return Event{Kind: EventDone, BudgetBP: m.rules.BudgetBP}
}

// InstrumentEvent declares op's paths as instrumentation.
func (m *Machine) InstrumentEvent(s *Status, workspace string, paths []operation.Path) Event {
	ev := Event{Kind: EventInstrument}
	for _, p := range paths {
		f := m.Classify(s, workspace, p)
		if f.Class == ClassInstrumentation {
			f.Class = ClassSource
		}
		ev.Files = append(ev.Files, f)
	}
	return ev
}

// ModeEvent is the user's (or someone's) request to switch mode; Step
// refuses it unless by is the user.
func ModeEvent(to Mode, by Actor, reason string) Event {
	return Event{Kind: EventMode, Mode: to, By: &by, Reason: reason}
}
