// Package tdd owns the test-first state machine of a coding session: the
// state gate every operation passes before the policy engine.
//
// The machine is a pure function. Step(status, event) returns the next
// status (or an *Error naming the action, the state and what to do
// instead), and Machine.Allowed(status, op) answers for any operation
// with a Decision whose Reason a model can act on. Decisions are data;
// enforcement belongs to the tool router. Persistence is separate: a
// Journal stores every transition in fluffy.db with a hash chain, and
// replays it to resume a session in the right state after a crash and to
// detect a rewritten history.
//
// Modes are the user's decision alone. SwitchMode refuses any actor but
// the user and returns the switch as an auditable event (data; the audit
// log records it). The parsers that turn real runner output into the
// events that move the machine live in testrun; coverage reports for
// explore mode's tech-debt budget in coverage.
//
// See docs/tdd.md for the state diagram, guards and modes.
package tdd

import (
	"errors"
	"fmt"
	"strings"
)

// Mode is the discipline a session works under.
type Mode string

// The modes.
const (
	// Strict: source files may be written only after a failing test
	// has been observed in the current cycle.
	Strict Mode = "strict"
	// Explore: writes are allowed anywhere; every source change made
	// without a failing test is tech debt that must be paid (coverage)
	// before done.
	Explore Mode = "explore"
	// Debug: read, run and instrument; source edits only in files
	// declared as instrumentation, which are reverted at the end.
	Debug Mode = "debug"
)

// Modes lists the modes in a stable order.
func Modes() []Mode { return []Mode{Strict, Explore, Debug} }

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return m == Strict || m == Explore || m == Debug }

// ParseMode checks a mode name.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if !m.Valid() {
		return "", fmt.Errorf("tdd: unknown mode %q (want strict, explore or debug)", s)
	}
	return m, nil
}

// State is where a session stands in its test-first cycle.
type State string

// The states, in cycle order.
const (
	// Idle: no cycle started yet.
	Idle State = "idle"
	// WritingTest: a test file was written in this cycle; the next
	// test run is expected to fail (a compile failure counts).
	WritingTest State = "writing_test"
	// Red: a failing run of this cycle's test was observed; the code
	// may now be written.
	Red State = "red"
	// Implementing: source files are being changed; the next test run
	// is expected to pass.
	Implementing State = "implementing"
	// Green: the tests passed after the change.
	Green State = "green"
	// Refactoring: source changes after green; the tests must stay
	// green (a failing run goes back to Implementing).
	Refactoring State = "refactoring"
	// Done: the cycle is finished; a new test starts the next one.
	Done State = "done"
)

// States lists the states in cycle order.
func States() []State {
	return []State{Idle, WritingTest, Red, Implementing, Green, Refactoring, Done}
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, x := range States() {
		if s == x {
			return true
		}
	}
	return false
}

// Sentinel errors callers branch on; every *Error wraps one of them.
var (
	// ErrInvalidTransition: the event is not accepted in this state.
	ErrInvalidTransition = errors.New("tdd: invalid transition")
	// ErrGuard: the transition exists but its guard does not hold.
	ErrGuard = errors.New("tdd: guard not satisfied")
	// ErrNotUser: someone other than the user tried to switch mode.
	ErrNotUser = errors.New("tdd: only the user can switch the TDD mode")
	// ErrBadEvent: the event is malformed (unknown kind, missing data).
	ErrBadEvent = errors.New("tdd: malformed event")
	// ErrTampered: the stored history does not verify.
	ErrTampered = errors.New("tdd: transition history was altered")
)

// Code is a stable, machine-readable reason.
type Code string

// The reason codes of decisions and errors.
const (
	CodeNotGated        Code = "not_gated"         // not a file write: the TDD gate does not restrict it
	CodeRun             Code = "run"               // commands run freely; test results move the machine
	CodeOutside         Code = "outside_workspace" // left to the policy engine
	CodeExempt          Code = "exempt"            // docs, config, generated files
	CodeTestWrite       Code = "test_write"        // a test file
	CodeSourceWrite     Code = "source_write"      // a source write the cycle allows
	CodeInstrumentation Code = "instrumentation"   // a declared instrumentation file (debug)
	CodeDebt            Code = "tech_debt"         // explore: allowed, recorded as debt
	CodeNeedFailingTest Code = "need_failing_test" // strict: write a failing test first
	CodeNeedRedRun      Code = "need_red_run"      // strict: run the new test and see it fail
	CodeDebugSource     Code = "debug_source"      // debug: source edits only in instrumentation
	CodeNotGreen        Code = "not_green"         // done needs a passing run after the last change
	CodeNoRed           Code = "no_red_observed"   // strict done: no failing-then-passing test
	CodeDebtUnpaid      Code = "debt_unpaid"       // coverage of indebted files too low
	CodeCoverageStale   Code = "coverage_stale"    // no coverage measured since the last change
	CodeNotUser         Code = "not_user"          // mode switch by someone else
	CodeBadEvent        Code = "bad_event"
	CodeNoPaths         Code = "no_paths" // a write whose paths are unknown
)

// Error is a refused event or operation: which action, in which state and
// mode, and the reason to show the model. It wraps one of the sentinels.
type Error struct {
	Action string
	State  State
	Mode   Mode
	Code   Code
	// Reason says what to do instead; it names no host path outside
	// the workspace and is safe to show the model.
	Reason string
	// Allowed lists the states in which Action is accepted, for an
	// invalid transition.
	Allowed []State
	Err     error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tdd: cannot %s in state %s (mode %s)", e.Action, e.State, e.Mode)
	if len(e.Allowed) > 0 {
		b.WriteString("; allowed in: ")
		for i, s := range e.Allowed {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(string(s))
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// require returns an ErrInvalidTransition *Error unless s is in one of the
// allowed states.
func require(action string, s *Status, code Code, reason string, allowed ...State) error {
	for _, a := range allowed {
		if s.State == a {
			return nil
		}
	}
	return &Error{Action: action, State: s.State, Mode: s.Mode, Code: code, Reason: reason, Allowed: allowed, Err: ErrInvalidTransition}
}

func guard(action string, s *Status, code Code, reason string) error {
	return &Error{Action: action, State: s.State, Mode: s.Mode, Code: code, Reason: reason, Err: ErrGuard}
}
