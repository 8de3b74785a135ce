package tdd

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// Status is a session's whole TDD state: everything Step needs. It is
// data, encoded canonically (encoding/json of this struct, map keys
// sorted) for the journal's hashes.
type Status struct {
	Mode  Mode  `json:"mode"`
	State State `json:"state"`
	// Seq counts the transitions applied (the journal's row number).
	Seq   int64 `json:"seq"`
	Cycle int   `json:"cycle"`
	// RedSeq is the transition at which a failing run of this cycle's
	// test was observed (0: none yet); GreenSeq the passing run after
	// it.
	RedSeq   int64 `json:"red_seq,omitempty"`
	GreenSeq int64 `json:"green_seq,omitempty"`
	// CycleTests are the test files written in this cycle.
	CycleTests []string `json:"cycle_tests,omitempty"`
	// LastWriteSeq is the last transition that wrote a test or source
	// file.
	LastWriteSeq int64 `json:"last_write_seq,omitempty"`
	// Debt lists source files changed without a failing test (explore).
	Debt []Debt `json:"debt,omitempty"`
	// Baseline is the coverage measured before the untested changes;
	// Coverage the latest measurement, at CoverageSeq.
	Baseline    *coverage.Report `json:"baseline,omitempty"`
	Coverage    *coverage.Report `json:"coverage,omitempty"`
	CoverageSeq int64            `json:"coverage_seq,omitempty"`
	// Instrumented lists the files declared as instrumentation (debug).
	Instrumented []string `json:"instrumented,omitempty"`
	LastRun      *Run     `json:"last_run,omitempty"`
}

// Debt is one source file changed without a test.
type Debt struct {
	Path string `json:"path"`
	Seq  int64  `json:"seq"`
}

// Run is the part of a test run the machine keeps.
type Run struct {
	Seq         int64             `json:"seq,omitempty"`
	Runner      string            `json:"runner"`
	Outcome     testrun.Outcome   `json:"outcome"`
	Passed      int               `json:"passed"`
	Failed      int               `json:"failed"`
	Skipped     int               `json:"skipped"`
	BuildFailed bool              `json:"build_failed,omitempty"`
	Failures    []testrun.Failure `json:"failures,omitempty"`
}

// maxRunFailures caps the failures a Run keeps in the journal.
const maxRunFailures = 10

// RunOf summarizes a parsed result for an EventTestRun.
func RunOf(r *testrun.Result) *Run {
	run := &Run{Runner: r.Runner, Outcome: r.Outcome(), Passed: r.Passed, Failed: r.Failed, Skipped: r.Skipped, BuildFailed: r.BuildFailed}
	run.Failures = append(run.Failures, r.Failures[:min(len(r.Failures), maxRunFailures)]...)
	return run
}

// EventKind names what happened.
type EventKind string

// The events.
const (
	// EventStart opens a session's journal in Mode.
	EventStart EventKind = "start"
	// EventWrite: files were (or are about to be) written.
	EventWrite EventKind = "write"
	// EventTestRun: a test run finished, with its parsed Run.
	EventTestRun EventKind = "test_run"
	// EventCoverage: a coverage measurement; Baseline marks the one
	// taken before changes.
	EventCoverage EventKind = "coverage"
	// EventInstrument declares files as instrumentation (debug only).
	EventInstrument EventKind = "instrument"
	// EventDone: the agent says the cycle is finished.
	EventDone EventKind = "done"
	// EventMode: the user switches mode.
	EventMode EventKind = "mode"
)

// ActorKind says who asked for something.
type ActorKind string

// The actors. Only ActorUser may switch mode.
const (
	ActorUser   ActorKind = "user"
	ActorModel  ActorKind = "model"
	ActorSystem ActorKind = "system"
)

// Actor is who asked: the kind, an identifier (user name, sub-agent id),
// and the route (cli, approval, matrix, ...).
type Actor struct {
	Kind ActorKind `json:"kind"`
	ID   string    `json:"id,omitempty"`
	Via  string    `json:"via,omitempty"`
}

// Event is one input of the machine.
type Event struct {
	Kind EventKind `json:"kind"`
	// Mode: EventStart, EventMode.
	Mode Mode `json:"mode,omitempty"`
	// By: EventMode (who asked); Reason: why, as they said it.
	By     *Actor `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Files: EventWrite, EventInstrument (classified by the Machine).
	Files []File `json:"files,omitempty"`
	// Run: EventTestRun.
	Run *Run `json:"run,omitempty"`
	// Coverage and Baseline: EventCoverage.
	Coverage *coverage.Report `json:"coverage,omitempty"`
	Baseline bool             `json:"baseline,omitempty"`
	// BudgetBP: EventDone, the budget in force (from the Machine's
	// rules), recorded so a replay does not depend on configuration.
	BudgetBP int64 `json:"budget_bp,omitempty"`
}

// Transition is the result of a successful Step.
type Transition struct {
	Seq    int64  `json:"seq"`
	From   State  `json:"from"`
	To     State  `json:"to"`
	Mode   Mode   `json:"mode"`
	Event  Event  `json:"event"`
	Status Status `json:"-"`
	// Code and Notes say what the step means, for the model.
	Code  Code     `json:"code,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// Revert lists instrumentation files the caller must revert now
	// (leaving debug mode, or done in debug mode).
	Revert []string `json:"revert,omitempty"`
	// ModeSwitch is set for EventMode: the auditable record.
	ModeSwitch *ModeSwitch `json:"mode_switch,omitempty"`
	// DebtCoverage is each indebted file against the budget, after a
	// test run that measured coverage (Session.TestRun).
	DebtCoverage []DebtCoverage `json:"debt_coverage,omitempty"`
}

// ModeSwitch is the auditable record of a mode switch; the caller hands it
// to the audit log.
type ModeSwitch struct {
	From   Mode     `json:"from"`
	To     Mode     `json:"to"`
	By     Actor    `json:"by"`
	Reason string   `json:"reason,omitempty"`
	Revert []string `json:"revert,omitempty"`
	Seq    int64    `json:"seq"`
}

// Initial is the status of a session before its first event.
func Initial() Status { return Status{State: Idle} }

// Step applies one event to a status: the machine's transition function.
// It is pure: it does not modify s (slices are copied) and depends on
// nothing but its arguments. A refused event returns an *Error wrapping
// ErrInvalidTransition, ErrGuard, ErrNotUser or ErrBadEvent, and no
// transition.
func Step(s Status, ev Event) (Transition, error) {
	n := s.clone()
	n.Seq = s.Seq + 1
	t := Transition{Seq: n.Seq, From: s.State, Event: ev}
	var err error
	if s.Seq == 0 && ev.Kind != EventStart {
		err = &Error{Action: "apply " + string(ev.Kind), State: s.State, Mode: s.Mode, Code: CodeBadEvent, Reason: "the journal must begin with a start event", Err: ErrBadEvent}
	} else {
		switch ev.Kind {
		case EventStart:
			err = stepStart(&n, ev)
		case EventWrite:
			err = stepWrite(&n, &t, ev)
		case EventTestRun:
			err = stepRun(&n, &t, ev)
		case EventCoverage:
			err = stepCoverage(&n, &t, ev)
		case EventInstrument:
			err = stepInstrument(&n, &t, ev)
		case EventDone:
			err = stepDone(&n, &t, ev)
		case EventMode:
			err = stepMode(&n, &t, ev)
		default:
			err = &Error{Action: "apply " + string(ev.Kind), State: s.State, Mode: s.Mode, Code: CodeBadEvent, Reason: "unknown event kind", Err: ErrBadEvent}
		}
	}
	if err != nil {
		return Transition{}, err
	}
	t.To, t.Mode, t.Status = n.State, n.Mode, n
	return t, nil
}

func (s Status) clone() Status {
	n := s
	n.CycleTests = slices.Clone(s.CycleTests)
	n.Debt = slices.Clone(s.Debt)
	n.Instrumented = slices.Clone(s.Instrumented)
	return n
}

func badEvent(s *Status, action, reason string) error {
	return &Error{Action: action, State: s.State, Mode: s.Mode, Code: CodeBadEvent, Reason: reason, Err: ErrBadEvent}
}

func stepStart(n *Status, ev Event) error {
	if n.Seq != 1 {
		return require("start the session", n, CodeBadEvent, "the session has already started")
	}
	if !ev.Mode.Valid() {
		return badEvent(n, "start the session", fmt.Sprintf("unknown mode %q", ev.Mode))
	}
	n.Mode, n.State = ev.Mode, Idle
	return nil
}

func stepWrite(n *Status, t *Transition, ev Event) error {
	const action = "write files"
	if len(ev.Files) == 0 {
		return &Error{Action: action, State: n.State, Mode: n.Mode, Code: CodeNoPaths, Reason: "a write must name the files it changes", Err: ErrBadEvent}
	}
	// Tests first: one operation that writes a test and its code is
	// judged as the test, then the code.
	files := slices.Clone(ev.Files)
	slices.SortStableFunc(files, func(a, b File) int { return classOrder(a.Class) - classOrder(b.Class) })
	t.Code = CodeExempt
	for _, f := range files {
		switch f.Class {
		case ClassOutside:
			t.Code = CodeOutside
		case ClassExempt:
		case ClassInstrumentation:
			if n.Mode != Debug || !contains(n.Instrumented, f.Path) {
				return badEvent(n, action, f.Path+" is not a declared instrumentation file")
			}
			t.Code = CodeInstrumentation
		case ClassTest:
			writeTest(n, t, f.Path)
		case ClassSource:
			if err := writeSource(n, t, f.Path); err != nil {
				return err
			}
		default:
			return badEvent(n, action, fmt.Sprintf("unknown file class %q", f.Class))
		}
	}
	return nil
}

func classOrder(c Class) int {
	switch c {
	case ClassTest:
		return 0
	case ClassSource:
		return 2
	}
	return 1
}

func writeTest(n *Status, t *Transition, p string) {
	t.Code = CodeTestWrite
	n.LastWriteSeq = n.Seq
	switch n.State {
	case Idle, Green, Refactoring, Done:
		// A new cycle.
		n.Cycle++
		n.RedSeq, n.GreenSeq = 0, 0
		n.CycleTests = []string{p}
		n.State = WritingTest
		t.Notes = append(t.Notes, "new test cycle: run the tests and see this test fail before changing the code")
	case WritingTest:
		addUnique(&n.CycleTests, p)
	case Red, Implementing:
		// The failing test changed: its failure must be seen again.
		addUnique(&n.CycleTests, p)
		n.RedSeq, n.GreenSeq = 0, 0
		n.State = WritingTest
		t.Notes = append(t.Notes, "the test changed: run it again and see it fail before changing the code")
	}
}

func writeSource(n *Status, t *Transition, p string) error {
	const action = "write a source file"
	switch n.Mode {
	case Debug:
		return guard(action, n, CodeDebugSource, fmt.Sprintf("debug mode allows source edits only in files declared as instrumentation, which are reverted at the end: declare %s as instrumentation first, or ask the user to switch mode", p))
	case Explore:
		if n.RedSeq == 0 || n.State == Idle || n.State == Done {
			if !slices.ContainsFunc(n.Debt, func(d Debt) bool { return d.Path == p }) {
				n.Debt = append(n.Debt, Debt{Path: p, Seq: n.Seq})
			}
			t.Code = CodeDebt
			t.Notes = append(t.Notes, "explore mode: "+p+" changed without a failing test; this is tech debt to pay with tests (coverage) before done")
		}
	default:
		// Strict, and any status whose mode is unset or unknown: the
		// gate fails closed.
		if n.RedSeq == 0 || n.State == Idle || n.State == Done {
			if n.State == WritingTest {
				return guard(action, n, CodeNeedRedRun, fmt.Sprintf("run the tests and see the new test (%s) fail first; a compile failure counts", strings.Join(n.CycleTests, ", ")))
			}
			return guard(action, n, CodeNeedFailingTest, "write a failing test first: test files here match "+hintFor(p))
		}
		if err := require(action, n, CodeNeedFailingTest, "write a failing test first", Red, Implementing, Green, Refactoring); err != nil {
			return err
		}
	}
	n.LastWriteSeq = n.Seq
	if t.Code != CodeDebt {
		t.Code = CodeSourceWrite
	}
	switch n.State {
	case Green, Refactoring:
		n.State = Refactoring
	default:
		n.State = Implementing
	}
	n.GreenSeq = 0
	return nil
}

// hintFor is replaced by the Machine's TestHint in Allowed; Step alone
// knows no patterns.
func hintFor(p string) string {
	return "the configured test patterns (" + p + " is a source file)"
}

func stepRun(n *Status, t *Transition, ev Event) error {
	const action = "record a test run"
	if ev.Run == nil {
		return badEvent(n, action, "a test run event needs its result")
	}
	switch ev.Run.Outcome {
	case testrun.Passed, testrun.Failed, testrun.NoTests:
	default:
		return badEvent(n, action, fmt.Sprintf("unknown outcome %q", ev.Run.Outcome))
	}
	run := *ev.Run
	run.Seq = n.Seq
	n.LastRun = &run
	t.Code = CodeRun
	switch ev.Run.Outcome {
	case testrun.NoTests:
		t.Notes = append(t.Notes, "the run ran no test: it is neither red nor green")
	case testrun.Failed:
		switch n.State {
		case WritingTest:
			if relates(ev.Run, n.CycleTests) {
				n.State, n.RedSeq = Red, n.Seq
				t.Notes = append(t.Notes, "red: the new test fails; now write the code that makes it pass")
			} else {
				t.Notes = append(t.Notes, "the failures are not in this cycle's test files ("+strings.Join(n.CycleTests, ", ")+"): run the new test and see it fail")
			}
		case Green, Refactoring:
			n.State, n.GreenSeq = Implementing, 0
			t.Notes = append(t.Notes, "the tests broke after green: fix the code until they pass again")
		}
	case testrun.Passed:
		switch n.State {
		case WritingTest:
			if n.Mode == Explore && len(n.Debt) > 0 {
				// Explore mode pays debt with tests written after
				// the code: they pass at once.
				n.State, n.GreenSeq = Green, n.Seq
				t.Notes = append(t.Notes, "green: the tests pass; the tech debt is paid when the coverage test.run measures reaches the budget, then finish")
				break
			}
			t.Notes = append(t.Notes, "the new test passes without a code change: make it assert the missing behaviour so that it fails")
		case Red, Implementing, Refactoring:
			if n.RedSeq > 0 || n.Mode == Explore {
				n.State, n.GreenSeq = Green, n.Seq
				t.Notes = append(t.Notes, "green: the tests pass; refactor with the tests staying green, or finish")
			}
		}
	}
	return nil
}

// relates reports whether a failing run fails in one of the cycle's test
// files: a failure whose file is one of them (runners print paths
// relative to different roots, so either may be a suffix of the other),
// a Go failure in the package directory of one of them, a JUnit class or
// Python module naming one of them, or a failure the runner gave no
// location at all.
func relates(run *Run, tests []string) bool {
	if len(run.Failures) == 0 {
		return run.Failed > 0 || run.BuildFailed
	}
	for _, f := range run.Failures {
		if f.File == "" && f.Package == "" {
			return true
		}
		for _, tf := range tests {
			dir := tf[:max(strings.LastIndexByte(tf, '/'), 0)]
			inPkg := dir == "" || f.Package == dir || strings.HasSuffix(f.Package, "/"+dir)
			if f.File != "" {
				file := strings.TrimPrefix(f.File, "./")
				if file == tf || strings.HasSuffix(file, "/"+tf) {
					return true
				}
				// A bare file name (go test prints base names) must
				// also be in the test's package, when one is given.
				if strings.HasSuffix(tf, "/"+file) && (strings.Contains(file, "/") || f.Package == "" || inPkg) {
					return true
				}
				continue
			}
			if inPkg || classMatches(f.Package, tf) {
				return true
			}
		}
	}
	return false
}

// classMatches relates a dotted class or module name (JUnit's classname:
// "com.example.CalcTest", pytest's "tests.test_calc.TestAdd") to a test
// file: the name, or its parent for a class inside a module, as a path is
// the file's path without extension, or a suffix of it.
func classMatches(class, testFile string) bool {
	if !strings.Contains(class, ".") && !strings.HasPrefix(testFile, class) {
		return false
	}
	stem := strings.TrimSuffix(testFile, path.Ext(testFile))
	p := strings.ReplaceAll(class, ".", "/")
	for _, c := range []string{p, p[:max(strings.LastIndexByte(p, '/'), 0)]} {
		if c != "" && (stem == c || strings.HasSuffix(stem, "/"+c)) {
			return true
		}
	}
	return false
}

func stepCoverage(n *Status, t *Transition, ev Event) error {
	const action = "record coverage"
	if ev.Coverage == nil {
		return badEvent(n, action, "a coverage event needs its report")
	}
	t.Code = CodeRun
	if ev.Baseline {
		if len(n.Debt) > 0 {
			return guard(action, n, CodeDebtUnpaid, "the baseline cannot move while tech debt is open; pay it with tests first")
		}
		n.Baseline = ev.Coverage
		t.Notes = append(t.Notes, "coverage baseline recorded")
		return nil
	}
	n.Coverage, n.CoverageSeq = ev.Coverage, n.Seq
	return nil
}

func stepInstrument(n *Status, t *Transition, ev Event) error {
	const action = "declare instrumentation"
	if n.Mode != Debug {
		return guard(action, n, CodeDebugSource, "instrumentation exists only in debug mode; ask the user to switch to debug mode")
	}
	if len(ev.Files) == 0 {
		return &Error{Action: action, State: n.State, Mode: n.Mode, Code: CodeNoPaths, Reason: "name the files to instrument", Err: ErrBadEvent}
	}
	for _, f := range ev.Files {
		if f.Class == ClassOutside || f.Class == ClassExempt || f.Path == "" {
			return badEvent(n, action, f.Path+" is not a workspace source or test file")
		}
		addUnique(&n.Instrumented, f.Path)
	}
	t.Code = CodeInstrumentation
	t.Notes = append(t.Notes, "instrumentation files may be edited now; they are reverted when debug mode ends")
	return nil
}

func stepDone(n *Status, t *Transition, ev Event) error {
	const action = "finish"
	if err := require(action, n, CodeNotGreen, "finish only after a passing test run that follows the last change", Green); err != nil {
		return err
	}
	if n.Mode != Explore && (n.RedSeq == 0 || n.GreenSeq <= n.RedSeq) {
		return guard(action, n, CodeNoRed, "strict mode needs a failing test observed and then passing in this cycle")
	}
	if len(n.Debt) > 0 {
		if err := debtPaid(n, action, ev.BudgetBP); err != nil {
			return err
		}
		n.Debt = nil
		t.Notes = append(t.Notes, "tech debt paid")
	}
	if len(n.Instrumented) > 0 {
		t.Revert = n.Instrumented
		n.Instrumented = nil
	}
	n.State = Done
	t.Code = CodeRun
	return nil
}

// DebtCoverage is one indebted file against explore mode's budget: its
// coverage in the latest measurement (basis points; Measured is false when
// the measurement does not list the file) and what paying needs.
type DebtCoverage struct {
	Path     string `json:"path"`
	GotBP    int64  `json:"got_bp"`
	NeedBP   int64  `json:"need_bp"`
	Measured bool   `json:"measured"`
}

// Paid reports whether the file's coverage reaches what it needs.
func (d DebtCoverage) Paid() bool { return d.GotBP >= d.NeedBP }

func (d DebtCoverage) String() string {
	if !d.Measured {
		return fmt.Sprintf("%s not in the coverage report (0%%) < %s", d.Path, pct(d.NeedBP))
	}
	return fmt.Sprintf("%s %s < %s", d.Path, pct(d.GotBP), pct(d.NeedBP))
}

// DebtStatus measures every indebted file of s against the budget: its
// coverage in s.Coverage (0 when unmeasured) against its baseline (the
// file's, else the whole baseline's; 100 % when no baseline was taken)
// minus the budget. Nil when s has no debt or no measurement.
func DebtStatus(s Status, budget int64) []DebtCoverage {
	if len(s.Debt) == 0 || s.Coverage == nil {
		return nil
	}
	out := make([]DebtCoverage, 0, len(s.Debt))
	for _, d := range s.Debt {
		base := int64(10000)
		if s.Baseline != nil {
			if f, ok := s.Baseline.Lookup(d.Path); ok {
				base = f.BP()
			} else {
				base = s.Baseline.Total().BP()
			}
		}
		dc := DebtCoverage{Path: d.Path, NeedBP: max(base-budget, 0)}
		if cur, ok := s.Coverage.Lookup(d.Path); ok {
			dc.GotBP, dc.Measured = cur.BP(), true
		}
		out = append(out, dc)
	}
	return out
}

// debtPaid checks explore mode's budget before action (finish, or a
// switch to strict mode): every indebted file's coverage, measured after
// the last change, is at least what DebtStatus says it needs.
func debtPaid(n *Status, action string, budget int64) error {
	if n.Coverage == nil || n.CoverageSeq <= n.LastWriteSeq {
		return guard(action, n, CodeCoverageStale, "measure coverage after the last change (test.run measures it in explore mode) to pay the tech debt of: "+debtPaths(n))
	}
	var short []string
	for _, d := range DebtStatus(*n, budget) {
		if !d.Paid() {
			short = append(short, d.String())
		}
	}
	if len(short) > 0 {
		return guard(action, n, CodeDebtUnpaid, "tech debt unpaid: write tests until coverage reaches baseline minus budget: "+strings.Join(short, "; "))
	}
	return nil
}

func debtPaths(n *Status) string {
	ps := make([]string, len(n.Debt))
	for i, d := range n.Debt {
		ps[i] = d.Path
	}
	return strings.Join(ps, ", ")
}

func pct(bp int64) string { return fmt.Sprintf("%d.%02d%%", bp/100, bp%100) }

func stepMode(n *Status, t *Transition, ev Event) error {
	const action = "switch mode"
	if ev.By == nil || ev.By.Kind != ActorUser {
		who := "nobody"
		if ev.By != nil {
			who = string(ev.By.Kind)
		}
		return &Error{Action: action, State: n.State, Mode: n.Mode, Code: CodeNotUser, Reason: "switching mode is the user's decision (asked by " + who + "); ask the user", Err: ErrNotUser}
	}
	if !ev.Mode.Valid() {
		return badEvent(n, action, fmt.Sprintf("unknown mode %q", ev.Mode))
	}
	if ev.Mode == n.Mode {
		return &Error{Action: action, State: n.State, Mode: n.Mode, Code: CodeBadEvent, Reason: "already in " + string(n.Mode) + " mode", Err: ErrInvalidTransition}
	}
	sw := &ModeSwitch{From: n.Mode, To: ev.Mode, By: *ev.By, Reason: ev.Reason, Seq: n.Seq}
	if n.Mode == Debug && len(n.Instrumented) > 0 {
		sw.Revert, t.Revert = n.Instrumented, n.Instrumented
		n.Instrumented = nil
	}
	n.Mode = ev.Mode
	t.ModeSwitch = sw
	t.Code = CodeNotGated
	return nil
}

func addUnique(xs *[]string, x string) {
	if !contains(*xs, x) {
		*xs = append(*xs, x)
	}
}

// Next says, in one sentence, what the cycle expects now (for people and
// for the model's system prompt).
func (s Status) Next() string {
	switch s.State {
	case Idle, Done:
		if s.Mode == Debug {
			return "reproduce the problem: read, run, write a test or declare instrumentation"
		}
		return "write a failing test for the next behaviour"
	case WritingTest:
		return "run the tests and see the new test fail (a compile failure counts)"
	case Red:
		return "write the code that makes the failing test pass"
	case Implementing:
		return "run the tests until they pass"
	case Green:
		if len(s.Debt) > 0 {
			return "cover the tech debt with tests (test.run measures coverage), then finish"
		}
		return "refactor with the tests staying green, or finish"
	case Refactoring:
		return "run the tests: they must stay green"
	}
	return ""
}
