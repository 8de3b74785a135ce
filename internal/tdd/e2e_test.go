package tdd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// agent plays the tool router around a real Go module: each write asks
// the gate first, writes the file, and records the event; each test run
// runs the real `go test -json` and feeds the parsed result back.
type agent struct {
	t    *testing.T
	ws   string
	m    *Machine
	sess *Session
}

func (a *agent) write(rel, content string) Decision {
	a.t.Helper()
	op := operation.Operation{Tool: "fs.write", Action: operation.Write,
		Paths:   []operation.Path{{Abs: filepath.Join(a.ws, rel), InWorkspace: true}},
		Session: operation.Session{ID: a.sess.ID, Workspace: a.ws}}
	d := a.sess.Allowed(op)
	if !d.Allow {
		return d
	}
	if err := os.WriteFile(filepath.Join(a.ws, rel), []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.sess.Wrote(context.Background(), op); err != nil {
		a.t.Fatalf("apply write %s: %v", rel, err)
	}
	return d
}

func (a *agent) goTest(args ...string) Transition {
	a.t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = a.ws
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout = &out
	_ = cmd.Run() // a failing run exits 1: the report says why
	res, err := testrun.ParseGoJSON(&out)
	if err != nil {
		a.t.Fatalf("parse go test output: %v\n%s", err, out.String())
	}
	tr, err := a.sess.TestRun(context.Background(), res)
	if err != nil {
		a.t.Fatal(err)
	}
	return tr
}

// coverage runs the tests with a coverage profile: the run and the
// coverage both move the machine.
func (a *agent) coverage(baseline bool) {
	a.t.Helper()
	prof := filepath.Join(a.t.TempDir(), "cover.out")
	if tr := a.goTest("-coverprofile="+prof, "./..."); tr.Status.LastRun.Outcome != testrun.Passed {
		a.t.Fatalf("coverage run: %+v", tr.Status.LastRun)
	}
	f, err := os.Open(prof)
	if err != nil {
		a.t.Fatal(err)
	}
	defer f.Close()
	rep, err := coverage.ParseGoProfile(f)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.sess.Apply(context.Background(), Event{Kind: EventCoverage, Coverage: rep, Baseline: baseline}); err != nil {
		a.t.Fatal(err)
	}
}

func newAgent(t *testing.T, mode Mode) *agent {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "go.mod"), []byte("module example.com/calc\n\ngo 1.22\n"), 0o644)
	_, j := openJournal(t, t.TempDir())
	m := mustMachine(t, Options{BudgetPercent: 10})
	sess, err := Resume(context.Background(), j, m, "e2e", mode)
	if err != nil {
		t.Fatal(err)
	}
	return &agent{t: t, ws: ws, m: m, sess: sess}
}

// TestEndToEndStrictGo: the whole strict cycle on a real module with the
// real go command: code first is refused, the new test fails to compile
// (red), the code makes it pass (green), done.
func TestEndToEndStrictGo(t *testing.T) {
	a := newAgent(t, Strict)
	if d := a.write("calc.go", "package calc\n"); d.Allow || d.Code != CodeNeedFailingTest {
		t.Fatalf("code before test: %+v", d)
	}
	a.write("README.md", "# calc\n")
	a.write("calc_test.go", "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n")
	if d := a.write("calc.go", "package calc\n"); d.Allow || d.Code != CodeNeedRedRun {
		t.Fatalf("code before the red run: %+v", d)
	}
	if tr := a.goTest("./..."); tr.To != Red || !tr.Status.LastRun.BuildFailed {
		t.Fatalf("compile failure of the new test: to %s, run %+v", tr.To, tr.Status.LastRun)
	}
	if d := a.write("calc.go", "package calc\n\nfunc Add(a, b int) int { return a - b }\n"); !d.Allow || d.Next != Implementing {
		t.Fatalf("code after red: %+v", d)
	}
	if tr := a.goTest("./..."); tr.To != Implementing || tr.Status.LastRun.Outcome != testrun.Failed {
		t.Fatalf("wrong code: %s %+v", tr.To, tr.Status.LastRun)
	}
	if _, err := a.sess.Apply(context.Background(), a.m.DoneEvent()); err == nil {
		t.Fatal("done while red")
	}
	a.write("calc.go", "package calc\n\nfunc Add(a, b int) int { return a + b }\n")
	if tr := a.goTest("-run", "NoSuchTest", "./..."); tr.To != Implementing || tr.Status.LastRun.Outcome != testrun.NoTests {
		t.Fatalf("a run with no tests moved the machine: %s %+v", tr.To, tr.Status.LastRun)
	}
	if tr := a.goTest("./..."); tr.To != Green {
		t.Fatalf("right code: %s %+v", tr.To, tr.Status.LastRun)
	}
	if tr, err := a.sess.Finish(context.Background()); err != nil || tr.To != Done {
		t.Fatalf("done: %v", err)
	}
}

// TestEndToEndExploreDebt: explore mode lets code go first, records the
// debt, and refuses done until real coverage pays it.
func TestEndToEndExploreDebt(t *testing.T) {
	a := newAgent(t, Explore)
	// The project as it was when the user switched to explore, and the
	// coverage baseline measured then.
	os.WriteFile(filepath.Join(a.ws, "calc.go"), []byte("package calc\n\nfunc Add(a, b int) int { return a + b }\n"), 0o644)
	os.WriteFile(filepath.Join(a.ws, "calc_test.go"), []byte("package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n"), 0o644)
	a.coverage(true)
	if d := a.write("calc.go", "package calc\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Abs(x int) int {\n\tif x < 0 {\n\t\treturn -x\n\t}\n\treturn x\n}\n"); !d.Allow || d.Code != CodeDebt {
		t.Fatalf("explore write: %+v", d)
	}
	a.coverage(false)
	_, err := a.sess.Apply(context.Background(), a.m.DoneEvent())
	var te *Error
	if !asTDDError(err, &te) || te.Code != CodeDebtUnpaid {
		t.Fatalf("done with untested Abs: %v", err)
	}
	a.write("abs_test.go", "package calc\n\nimport \"testing\"\n\nfunc TestAbs(t *testing.T) {\n\tif Abs(-2) != 2 || Abs(3) != 3 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	a.coverage(false)
	if tr, err := a.sess.Apply(context.Background(), a.m.DoneEvent()); err != nil || tr.To != Done || len(tr.Status.Debt) != 0 {
		t.Fatalf("done after paying the debt: %v", err)
	}
}

func asTDDError(err error, te **Error) bool {
	return err != nil && errors.As(err, te)
}
