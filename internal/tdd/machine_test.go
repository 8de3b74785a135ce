package tdd

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// A tiny notation for events, so that cases read like a session.
func start(m Mode) Event { return Event{Kind: EventStart, Mode: m} }
func wTest(p string) Event {
	return Event{Kind: EventWrite, Files: []File{{Path: p, Class: ClassTest}}}
}
func wSrc(p string) Event {
	return Event{Kind: EventWrite, Files: []File{{Path: p, Class: ClassSource}}}
}
func wDoc(p string) Event {
	return Event{Kind: EventWrite, Files: []File{{Path: p, Class: ClassExempt}}}
}
func wInst(p string) Event {
	return Event{Kind: EventWrite, Files: []File{{Path: p, Class: ClassInstrumentation}}}
}
func instrument(p string) Event {
	return Event{Kind: EventInstrument, Files: []File{{Path: p, Class: ClassSource}}}
}
func failIn(file string) Event {
	return Event{Kind: EventTestRun, Run: &Run{Runner: "go", Outcome: testrun.Failed, Failed: 1, Failures: []testrun.Failure{{Name: "TestX", File: file}}}}
}
func buildFailIn(file string) Event {
	return Event{Kind: EventTestRun, Run: &Run{Runner: "go", Outcome: testrun.Failed, BuildFailed: true, Failures: []testrun.Failure{{Name: "pkg", File: file, Build: true}}}}
}
func pass() Event {
	return Event{Kind: EventTestRun, Run: &Run{Runner: "go", Outcome: testrun.Passed, Passed: 3}}
}
func noTests() Event {
	return Event{Kind: EventTestRun, Run: &Run{Runner: "go", Outcome: testrun.NoTests}}
}
func done(budget int64) Event { return Event{Kind: EventDone, BudgetBP: budget} }
func cov(baseline bool, files map[string]coverage.FileCoverage) Event {
	return Event{Kind: EventCoverage, Baseline: baseline, Coverage: &coverage.Report{Files: files}}
}
func fc(c, t int64) coverage.FileCoverage { return coverage.FileCoverage{Covered: c, Total: t} }
func byUser(m Mode) Event                 { return ModeEvent(m, Actor{Kind: ActorUser, ID: "alice", Via: "cli"}, "") }
func byModel(m Mode) Event                { return ModeEvent(m, Actor{Kind: ActorModel}, "please") }

// run applies events, failing the test on any refusal.
func run(t *testing.T, evs ...Event) Status {
	t.Helper()
	s := Initial()
	for i, ev := range evs {
		tr, err := Step(s, ev)
		if err != nil {
			t.Fatalf("setup event %d (%s): %v", i, ev.Kind, err)
		}
		s = tr.Status
	}
	return s
}

// The cycle prefixes used by the table.
var (
	toWriting = []Event{wTest("calc_test.go")}
	toRed     = append(append([]Event{}, toWriting...), failIn("calc_test.go"))
	toImpl    = append(append([]Event{}, toRed...), wSrc("calc.go"))
	toGreen   = append(append([]Event{}, toImpl...), pass())
	toRefac   = append(append([]Event{}, toGreen...), wSrc("calc.go"))
	toDone    = append(append([]Event{}, toGreen...), done(0))
)

func with(mode Mode, evs []Event) []Event { return append([]Event{start(mode)}, evs...) }

// TestTransitions covers every transition and guard: each row is a state
// reached by a prefix, one event, and the expected state or refusal.
func TestTransitions(t *testing.T) {
	cases := []struct {
		name   string
		mode   Mode
		prefix []Event
		ev     Event
		want   State
		err    error
		code   Code
	}{
		// idle
		{"idle: test write starts a cycle", Strict, nil, wTest("calc_test.go"), WritingTest, nil, CodeTestWrite},
		{"idle: strict source write refused", Strict, nil, wSrc("calc.go"), "", ErrGuard, CodeNeedFailingTest},
		{"idle: exempt write allowed", Strict, nil, wDoc("README.md"), Idle, nil, CodeExempt},
		{"idle: failing run moves nothing", Strict, nil, failIn("x_test.go"), Idle, nil, CodeRun},
		{"idle: done refused", Strict, nil, done(0), "", ErrInvalidTransition, CodeNotGreen},
		{"idle: explore source write is debt", Explore, nil, wSrc("calc.go"), Implementing, nil, CodeDebt},
		{"idle: debug source write refused", Debug, nil, wSrc("calc.go"), "", ErrGuard, CodeDebugSource},
		// writing_test
		{"writing: failing run of the new test is red", Strict, toWriting, failIn("calc_test.go"), Red, nil, CodeRun},
		{"writing: compile failure of the new test is red", Strict, toWriting, buildFailIn("pkg/calc_test.go"), Red, nil, CodeRun},
		{"writing: failure in another file is not red", Strict, toWriting, failIn("other_test.go"), WritingTest, nil, CodeRun},
		{"writing: passing run stays", Strict, toWriting, pass(), WritingTest, nil, CodeRun},
		{"writing: run with no tests is neither", Strict, toWriting, noTests(), WritingTest, nil, CodeRun},
		{"writing: strict source write needs a red run", Strict, toWriting, wSrc("calc.go"), "", ErrGuard, CodeNeedRedRun},
		{"writing: more test files", Strict, toWriting, wTest("more_test.go"), WritingTest, nil, CodeTestWrite},
		{"writing: done refused", Strict, toWriting, done(0), "", ErrInvalidTransition, CodeNotGreen},
		// red
		{"red: source write implements", Strict, toRed, wSrc("calc.go"), Implementing, nil, CodeSourceWrite},
		{"red: test edit needs a new red", Strict, toRed, wTest("calc_test.go"), WritingTest, nil, CodeTestWrite},
		{"red: passing run is green", Strict, toRed, pass(), Green, nil, CodeRun},
		{"red: done refused", Strict, toRed, done(0), "", ErrInvalidTransition, CodeNotGreen},
		// implementing
		{"implementing: more source", Strict, toImpl, wSrc("util.go"), Implementing, nil, CodeSourceWrite},
		{"implementing: failing run stays", Strict, toImpl, failIn("calc_test.go"), Implementing, nil, CodeRun},
		{"implementing: passing run is green", Strict, toImpl, pass(), Green, nil, CodeRun},
		{"implementing: no tests moves nothing", Strict, toImpl, noTests(), Implementing, nil, CodeRun},
		{"implementing: test edit needs a new red", Strict, toImpl, wTest("calc_test.go"), WritingTest, nil, CodeTestWrite},
		{"implementing: done refused", Strict, toImpl, done(0), "", ErrInvalidTransition, CodeNotGreen},
		// green
		{"green: done", Strict, toGreen, done(0), Done, nil, CodeRun},
		{"green: source write refactors", Strict, toGreen, wSrc("calc.go"), Refactoring, nil, CodeSourceWrite},
		{"green: failing run goes back", Strict, toGreen, failIn("calc_test.go"), Implementing, nil, CodeRun},
		{"green: new test starts a cycle", Strict, toGreen, wTest("next_test.go"), WritingTest, nil, CodeTestWrite},
		// refactoring
		{"refactoring: passing run is green", Strict, toRefac, pass(), Green, nil, CodeRun},
		{"refactoring: failing run goes back", Strict, toRefac, failIn("calc_test.go"), Implementing, nil, CodeRun},
		{"refactoring: done needs a run", Strict, toRefac, done(0), "", ErrInvalidTransition, CodeNotGreen},
		{"refactoring: new test starts a cycle", Strict, toRefac, wTest("next_test.go"), WritingTest, nil, CodeTestWrite},
		// done
		{"done: new test starts a cycle", Strict, toDone, wTest("next_test.go"), WritingTest, nil, CodeTestWrite},
		{"done: strict source write refused", Strict, toDone, wSrc("calc.go"), "", ErrGuard, CodeNeedFailingTest},
		{"done: done again refused", Strict, toDone, done(0), "", ErrInvalidTransition, CodeNotGreen},
		// explore
		{"explore: done with stale coverage refused", Explore, []Event{wSrc("calc.go"), pass()}, done(500), "", ErrGuard, CodeCoverageStale},
		{"explore: done with low coverage refused", Explore,
			[]Event{cov(true, map[string]coverage.FileCoverage{"m/calc.go": fc(8, 10)}), wSrc("calc.go"), pass(), cov(false, map[string]coverage.FileCoverage{"m/calc.go": fc(5, 10)})},
			done(500), "", ErrGuard, CodeDebtUnpaid},
		{"explore: done within budget", Explore,
			[]Event{cov(true, map[string]coverage.FileCoverage{"m/calc.go": fc(8, 10)}), wSrc("calc.go"), pass(), cov(false, map[string]coverage.FileCoverage{"m/calc.go": fc(3, 4)})},
			done(500), Done, nil, CodeRun},
		{"explore: new file judged against the baseline total", Explore,
			[]Event{cov(true, map[string]coverage.FileCoverage{"m/a.go": fc(9, 10)}), wSrc("new.go"), pass(), cov(false, map[string]coverage.FileCoverage{"m/new.go": fc(1, 2)})},
			done(500), "", ErrGuard, CodeDebtUnpaid},
		{"explore: no baseline means 100% minus budget", Explore,
			[]Event{wSrc("calc.go"), pass(), cov(false, map[string]coverage.FileCoverage{"m/calc.go": fc(19, 20)})},
			done(500), Done, nil, CodeRun},
		{"explore: baseline cannot move over open debt", Explore, []Event{wSrc("calc.go")},
			cov(true, map[string]coverage.FileCoverage{"m/calc.go": fc(0, 10)}), "", ErrGuard, CodeDebtUnpaid},
		{"explore: a test after indebted code may pass at once", Explore, []Event{wSrc("calc.go"), wTest("calc_test.go")}, pass(), Green, nil, CodeRun},
		{"explore: without debt a new test must fail first", Explore, toWriting, pass(), WritingTest, nil, CodeRun},
		{"explore: tested change is no debt", Explore, toRed, wSrc("calc.go"), Implementing, nil, CodeSourceWrite},
		// debug
		{"debug: instrument then write", Debug, []Event{instrument("calc.go")}, wInst("calc.go"), Idle, nil, CodeInstrumentation},
		{"debug: undeclared instrumentation refused", Debug, nil, wInst("calc.go"), "", ErrBadEvent, CodeBadEvent},
		{"debug: test write allowed", Debug, nil, wTest("repro_test.go"), WritingTest, nil, CodeTestWrite},
		{"strict: instrument refused", Strict, nil, instrument("calc.go"), "", ErrGuard, CodeDebugSource},
		// modes
		{"mode: user switch", Strict, toImpl, byUser(Explore), Implementing, nil, CodeNotGated},
		{"mode: model switch refused", Strict, nil, byModel(Explore), "", ErrNotUser, CodeNotUser},
		{"mode: system switch refused", Strict, nil, ModeEvent(Debug, Actor{Kind: ActorSystem}, ""), "", ErrNotUser, CodeNotUser},
		{"mode: same mode refused", Strict, nil, byUser(Strict), "", ErrInvalidTransition, CodeBadEvent},
		{"mode: unknown mode refused", Strict, nil, byUser("yolo"), "", ErrBadEvent, CodeBadEvent},
		// malformed
		{"start twice refused", Strict, nil, start(Strict), "", ErrInvalidTransition, CodeBadEvent},
		{"write without files refused", Strict, nil, Event{Kind: EventWrite}, "", ErrBadEvent, CodeNoPaths},
		{"run without result refused", Strict, nil, Event{Kind: EventTestRun}, "", ErrBadEvent, CodeBadEvent},
		{"unknown event refused", Strict, nil, Event{Kind: "teleport"}, "", ErrBadEvent, CodeBadEvent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := run(t, with(c.mode, c.prefix)...)
			before := s.clone()
			tr, err := Step(s, c.ev)
			if c.err != nil {
				var te *Error
				if !errors.Is(err, c.err) || !errors.As(err, &te) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				if te.Code != c.code || te.Reason == "" || !strings.Contains(err.Error(), string(s.State)) {
					t.Errorf("error %q: code %s, want %s (and a reason naming the state)", err, te.Code, c.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected refusal: %v", err)
			}
			if tr.To != c.want || tr.Status.State != c.want {
				t.Errorf("to = %s, want %s", tr.To, c.want)
			}
			if tr.Code != c.code {
				t.Errorf("code = %s, want %s", tr.Code, c.code)
			}
			if tr.Seq != s.Seq+1 || tr.From != s.State {
				t.Errorf("seq/from = %d/%s", tr.Seq, tr.From)
			}
			if s.State != before.State || len(s.Debt) != len(before.Debt) {
				t.Error("Step modified its input")
			}
		})
	}
}

func TestRelates(t *testing.T) {
	tests := []string{"pkg/calc/calc_test.go"}
	cases := []struct {
		f    testrun.Failure
		want bool
	}{
		{testrun.Failure{File: "calc_test.go", Package: "example.com/m/pkg/calc"}, true},
		{testrun.Failure{File: "calc_test.go", Package: "example.com/m/other"}, false},
		{testrun.Failure{File: "calc_test.go"}, true},
		{testrun.Failure{File: "pkg/calc/calc_test.go", Build: true}, true},
		{testrun.Failure{File: "/tmp/ws/pkg/calc/calc_test.go"}, true},
		{testrun.Failure{File: "./pkg/calc/calc_test.go"}, true},
		{testrun.Failure{File: "other/calc_test.go"}, false},
		{testrun.Failure{Package: "example.com/m/pkg/calc"}, true},
		{testrun.Failure{Package: "example.com/m/pkg"}, false},
		{testrun.Failure{Name: "mystery"}, true},
	}
	for _, c := range cases {
		if got := relates(&Run{Failed: 1, Failures: []testrun.Failure{c.f}}, tests); got != c.want {
			t.Errorf("relates(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	java := []string{"src/test/java/com/example/CalcTest.java"}
	for class, want := range map[string]bool{"com.example.CalcTest": true, "com.example.OtherTest": false, "example.CalcTest": true, "CalcTest": false} {
		if got := relates(&Run{Failed: 1, Failures: []testrun.Failure{{Name: "adds", Package: class}}}, java); got != want {
			t.Errorf("java class %s: relates = %v, want %v", class, got, want)
		}
	}
	py := []string{"tests/test_calc.py"}
	for class, want := range map[string]bool{"tests.test_calc": true, "tests.test_calc.TestAdd": true, "tests.test_other.TestAdd": false} {
		if got := relates(&Run{Failed: 1, Failures: []testrun.Failure{{Name: "t", Package: class}}}, py); got != want {
			t.Errorf("python class %s: relates = %v, want %v", class, got, want)
		}
	}
	if !relates(&Run{Failed: 1}, tests) || relates(&Run{}, tests) {
		t.Error("failures without details")
	}
}

func TestNext(t *testing.T) {
	for _, st := range States() {
		for _, m := range Modes() {
			if (Status{Mode: m, State: st}).Next() == "" {
				t.Errorf("no next step for %s in %s", st, m)
			}
		}
	}
	if n := (Status{Mode: Explore, State: Green, Debt: []Debt{{Path: "a.go"}}}).Next(); !strings.Contains(n, "coverage") {
		t.Errorf("green with debt: %q", n)
	}
}

func TestRequireMessage(t *testing.T) {
	s := run(t, start(Strict))
	_, err := Step(s, done(0))
	want := "tdd: cannot finish in state idle (mode strict); allowed in: green: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %v, want prefix %q", err, want)
	}
}

func TestDebugRevertsInstrumentation(t *testing.T) {
	s := run(t, start(Debug), instrument("calc.go"), wInst("calc.go"))
	tr, err := Step(s, byUser(Strict))
	if err != nil {
		t.Fatal(err)
	}
	if tr.ModeSwitch == nil || tr.ModeSwitch.From != Debug || tr.ModeSwitch.To != Strict || tr.ModeSwitch.By.ID != "alice" {
		t.Fatalf("mode switch record = %+v", tr.ModeSwitch)
	}
	if len(tr.Revert) != 1 || tr.Revert[0] != "calc.go" || len(tr.ModeSwitch.Revert) != 1 {
		t.Fatalf("revert = %v", tr.Revert)
	}
	// Back in strict, the file is an ordinary source file again.
	if _, err := Step(tr.Status, wInst("calc.go")); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("instrumentation write after debug: %v", err)
	}
}

// TestAllowedFailsClosedBeforeStart: a status that never saw a start event
// (mode unset) is judged as strict.
func TestAllowedFailsClosedBeforeStart(t *testing.T) {
	m := mustMachine(t, Options{})
	if d := m.Allowed(Initial(), writeOp("/ws", "/ws/calc.go")); d.Allow || d.Code != CodeNeedFailingTest {
		t.Fatalf("unstarted session: %+v", d)
	}
	if d := m.Allowed(Status{Mode: "bogus", State: Red, Seq: 3}, writeOp("/ws", "/ws/calc.go")); d.Allow {
		t.Fatalf("unknown mode: %+v", d)
	}
}

func TestModelCannotSwitchThroughAllowed(t *testing.T) {
	// The mode never changes through an operation: whatever a model
	// writes, Status.Mode stays.
	m := mustMachine(t, Options{})
	s := run(t, start(Strict))
	op := writeOp("/ws", "/ws/.fluffy/config.yaml")
	d := m.Allowed(s, op)
	if d.Mode != Strict || d.Next == "" && d.Allow {
		t.Fatalf("decision %+v", d)
	}
}

func mustMachine(t testing.TB, o Options) *Machine {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeOp(ws string, paths ...string) operation.Operation {
	op := operation.Operation{Tool: "fs.write", Action: operation.Write, Session: operation.Session{ID: "s1", Workspace: ws}}
	for _, p := range paths {
		op.Paths = append(op.Paths, operation.Path{Abs: p, InWorkspace: strings.HasPrefix(p, ws+"/")})
	}
	return op
}

func TestAllowed(t *testing.T) {
	m := mustMachine(t, Options{BudgetPercent: 5})
	ws := "/ws"
	cases := []struct {
		name   string
		status []Event
		op     operation.Operation
		allow  bool
		code   Code
		reason string
	}{
		{"read", with(Strict, nil), operation.Operation{Action: operation.Read}, true, CodeNotGated, "not a file write"},
		{"exec", with(Strict, nil), operation.Operation{Action: operation.Exec, Argv: []string{"go", "test"}}, true, CodeRun, "test results"},
		{"unknown action", with(Strict, nil), operation.Operation{Action: "teleport"}, false, CodeBadEvent, "refused"},
		{"write without paths", with(Strict, nil), operation.Operation{Action: operation.Write}, false, CodeNoPaths, "name the files"},
		{"go source in idle", with(Strict, nil), writeOp(ws, "/ws/calc.go"), false, CodeNeedFailingTest, "write a failing test first: test files here match *_test.go"},
		{"python source in idle", with(Strict, nil), writeOp(ws, "/ws/calc.py"), false, CodeNeedFailingTest, "test_*.py"},
		{"ts source in idle", with(Strict, nil), writeOp(ws, "/ws/src/calc.ts"), false, CodeNeedFailingTest, "*.{test,spec}."},
		{"rust source in idle", with(Strict, nil), writeOp(ws, "/ws/src/lib.rs"), false, CodeNeedFailingTest, "tests/**/*.rs"},
		{"java source in idle", with(Strict, nil), writeOp(ws, "/ws/src/main/java/Calc.java"), false, CodeNeedFailingTest, "*Test.java"},
		{"go test in idle", with(Strict, nil), writeOp(ws, "/ws/calc_test.go"), true, CodeTestWrite, "see this test fail"},
		{"markdown", with(Strict, nil), writeOp(ws, "/ws/README.md"), true, CodeExempt, "exempt"},
		{"outside workspace", with(Strict, nil), writeOp(ws, "/etc/passwd"), true, CodeOutside, "policy engine"},
		{"test and source together in idle", with(Strict, nil), writeOp(ws, "/ws/calc.go", "/ws/calc_test.go"), false, CodeNeedRedRun, "see the new test (calc_test.go) fail"},
		{"source after red", with(Strict, toRed), writeOp(ws, "/ws/calc.go"), true, CodeSourceWrite, "failing test was observed"},
		{"explore source", with(Explore, nil), writeOp(ws, "/ws/calc.go"), true, CodeDebt, "tech debt"},
		{"debug source", with(Debug, nil), writeOp(ws, "/ws/calc.go"), false, CodeDebugSource, "instrumentation"},
		{"debug instrumented", with(Debug, []Event{instrument("calc.go")}), writeOp(ws, "/ws/calc.go"), true, CodeInstrumentation, "reverted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := run(t, c.status...)
			d := m.Allowed(s, c.op)
			if d.Allow != c.allow || d.Code != c.code || !strings.Contains(d.Reason, c.reason) {
				t.Errorf("Allowed = %+v\nwant allow=%v code=%s reason containing %q", d, c.allow, c.code, c.reason)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	m := mustMachine(t, Options{TestPatterns: []string{"spec/**"}, ExemptPatterns: []string{"*.proto"}})
	cases := map[string]Class{
		"calc.go":                         ClassSource,
		"pkg/calc_test.go":                ClassTest,
		"pkg/testdata/golden.json":        ClassTest,
		"test_calc.py":                    ClassTest,
		"pkg/calc_test.py":                ClassTest,
		"tests/unit/helpers.py":           ClassTest,
		"conftest.py":                     ClassTest,
		"calc.py":                         ClassSource,
		"src/calc.test.ts":                ClassTest,
		"src/calc.spec.jsx":               ClassTest,
		"src/__tests__/calc.js":           ClassTest,
		"src/calc.ts":                     ClassSource,
		"tests/sub.rs":                    ClassTest,
		"crates/a/tests/it.rs":            ClassTest,
		"src/lib.rs":                      ClassSource,
		"src/test/java/CalcTest.java":     ClassTest,
		"src/main/java/Calc.java":         ClassSource,
		"app/src/main/kotlin/CalcTest.kt": ClassTest,
		"README.md":                       ClassExempt,
		"docs/guide/index.html":           ClassExempt,
		"config.yaml":                     ClassExempt,
		"go.sum":                          ClassExempt,
		"api/v1/api.pb.go":                ClassExempt,
		"LICENSE":                         ClassExempt,
		"api.proto":                       ClassExempt,
		"spec/anything/at/all.rb":         ClassTest,
		"Makefile":                        ClassSource,
		"notdocs/x.go":                    ClassSource,
	}
	for rel, want := range cases {
		f := m.Classify(nil, "/ws", operation.Path{Abs: "/ws/" + rel, InWorkspace: true})
		if f.Class != want || f.Path != rel {
			t.Errorf("Classify(%s) = %+v, want %s", rel, f, want)
		}
	}
	// A path claiming to be inside but resolving outside is the
	// strictest class, never exempt.
	if f := m.Classify(nil, "/ws", operation.Path{Abs: "/etc/x.md", InWorkspace: true}); f.Class != ClassSource {
		t.Errorf("inconsistent path classified %s", f.Class)
	}
	if f := m.Classify(nil, "/ws", operation.Path{Abs: "/etc/x.go"}); f.Class != ClassOutside {
		t.Errorf("outside path classified %s", f.Class)
	}
}

func TestBadPatterns(t *testing.T) {
	for _, p := range []string{"", "/abs", "a{b", "a}b", "[x", "{a,{b}"} {
		if _, err := New(Options{TestPatterns: []string{p}}); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
	if _, err := New(Options{BudgetPercent: 101}); err == nil {
		t.Error("budget 101% accepted")
	}
}
