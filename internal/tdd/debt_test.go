package tdd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

func passWith(files map[string]coverage.FileCoverage) *testrun.Result {
	return &testrun.Result{Runner: "go", Passed: 2, Coverage: &coverage.Report{Files: files}}
}

func exploreSession(t *testing.T, budget int) (*Session, *Journal) {
	t.Helper()
	_, j := openJournal(t, t.TempDir())
	sess, err := Resume(context.Background(), j, mustMachine(t, Options{BudgetPercent: budget}), "d", Explore)
	if err != nil {
		t.Fatal(err)
	}
	return sess, j
}

// TestTestRunRecordsCoverage: a test run that measured coverage records it
// too: as the baseline while no debt is open, as the current measurement
// (with each indebted file against the budget) once it is.
func TestTestRunRecordsCoverage(t *testing.T) {
	ctx := context.Background()
	sess, j := exploreSession(t, 5)
	if _, err := sess.TestRun(ctx, passWith(map[string]coverage.FileCoverage{"m/calc.go": fc(8, 10)})); err != nil {
		t.Fatal(err)
	}
	if st := sess.Status(); st.Baseline == nil || st.Coverage != nil {
		t.Fatalf("coverage without debt is the baseline: %+v", st)
	}
	if _, err := sess.Wrote(ctx, writeOp("/ws", "/ws/calc.go")); err != nil {
		t.Fatal(err)
	}
	tr, err := sess.TestRun(ctx, passWith(map[string]coverage.FileCoverage{"m/calc.go": fc(6, 10)}))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Event.Kind != EventTestRun || tr.Status.Coverage == nil || tr.Status.CoverageSeq != tr.Seq+1 {
		t.Fatalf("run then coverage: %+v", tr)
	}
	want := []DebtCoverage{{Path: "calc.go", GotBP: 6000, NeedBP: 7500, Measured: true}}
	if len(tr.DebtCoverage) != 1 || tr.DebtCoverage[0] != want[0] {
		t.Fatalf("debt coverage %+v, want %+v", tr.DebtCoverage, want)
	}
	// Both events are in the journal and replay.
	if st, _, _, err := j.Load(ctx, "d"); err != nil || st.Coverage == nil || st.Baseline == nil {
		t.Fatalf("replay: %v", err)
	}
	// A run without coverage records none.
	before := sess.Status().Seq
	if tr, err := sess.TestRun(ctx, &testrun.Result{Runner: "go", Passed: 1}); err != nil || tr.Seq != before+1 || tr.DebtCoverage != nil {
		t.Fatalf("run without coverage: %+v, %v", tr, err)
	}
}

// TestSwitchToStrictNeedsDebtPaid: leaving explore mode for strict with
// open debt is refused, naming the files, until the coverage measured
// after the last change pays it; other switches are not.
func TestSwitchToStrictNeedsDebtPaid(t *testing.T) {
	ctx := context.Background()
	user := Actor{Kind: ActorUser, ID: "alice"}
	sess, j := exploreSession(t, 5)
	if _, err := sess.Wrote(ctx, writeOp("/ws", "/ws/calc.go")); err != nil {
		t.Fatal(err)
	}
	var te *Error
	_, err := sess.SwitchMode(ctx, Strict, user, "")
	if !errors.As(err, &te) || !errors.Is(err, ErrGuard) || te.Code != CodeCoverageStale || !strings.Contains(te.Reason, "calc.go") {
		t.Fatalf("switch with unmeasured debt: %v", err)
	}
	if _, err := sess.TestRun(ctx, passWith(map[string]coverage.FileCoverage{"m/calc.go": fc(1, 2)})); err != nil {
		t.Fatal(err)
	}
	_, err = sess.SwitchMode(ctx, Strict, user, "")
	if !errors.As(err, &te) || te.Code != CodeDebtUnpaid || !strings.Contains(te.Reason, "calc.go 50.00% < 95.00%") {
		t.Fatalf("switch with unpaid debt: %v", err)
	}
	if sess.Status().Mode != Explore {
		t.Fatal("a refused switch changed the mode")
	}
	if !sess.WantsCoverage() {
		t.Fatal("explore mode wants coverage")
	}
	// Debug is no way out either: from there, strict is judged alike.
	if _, err := sess.SwitchMode(ctx, Debug, user, ""); err != nil {
		t.Fatal(err)
	}
	if !sess.WantsCoverage() {
		t.Fatal("open debt wants coverage in any mode")
	}
	if _, err := sess.SwitchMode(ctx, Strict, user, ""); !errors.Is(err, ErrGuard) {
		t.Fatalf("debug → strict with unpaid debt: %v", err)
	}
	if _, err := sess.TestRun(ctx, passWith(map[string]coverage.FileCoverage{"m/calc.go": fc(2, 2)})); err != nil {
		t.Fatal(err)
	}
	if tr, err := sess.SwitchMode(ctx, Strict, user, "paid"); err != nil || tr.Mode != Strict {
		t.Fatalf("switch with paid debt: %v", err)
	}
	if _, _, _, err := j.Load(ctx, "d"); err != nil {
		t.Fatal(err)
	}
}

// TestReplayKeepsOldSwitchOverDebt: the debt check at a switch is the
// session's, not the machine's, so a journal that holds a switch to strict
// over open debt (stored before the check existed) still verifies.
func TestReplayKeepsOldSwitchOverDebt(t *testing.T) {
	ctx := context.Background()
	sess, j := exploreSession(t, 5)
	if _, err := sess.Wrote(ctx, writeOp("/ws", "/ws/calc.go")); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Apply(ctx, byUser(Strict)); err != nil {
		t.Fatal(err)
	}
	if st, _, _, err := j.Load(ctx, "d"); err != nil || st.Mode != Strict || len(st.Debt) != 1 {
		t.Fatalf("replay: %+v, %v", st, err)
	}
}

func TestDebtStatus(t *testing.T) {
	s := run(t, start(Explore), cov(true, map[string]coverage.FileCoverage{"m/a.go": fc(9, 10), "m/b.go": fc(1, 10)}),
		wSrc("a.go"), wSrc("new.go"), cov(false, map[string]coverage.FileCoverage{"m/a.go": fc(8, 10)}))
	got := DebtStatus(s, 500)
	want := []DebtCoverage{
		{Path: "a.go", GotBP: 8000, NeedBP: 8500, Measured: true},
		{Path: "new.go", NeedBP: 4500}, // the baseline's total, 50 %, minus 5 points
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("DebtStatus = %+v, want %+v", got, want)
	}
	if got[1].Paid() || !strings.Contains(got[1].String(), "new.go not in the coverage report") {
		t.Fatalf("unmeasured file: %s", got[1])
	}
	if DebtStatus(run(t, start(Explore)), 500) != nil {
		t.Fatal("no debt, no status")
	}
}
