package tdd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/store"
)

func openJournal(t testing.TB, home string) (*store.DB, *Journal) {
	t.Helper()
	db, err := store.OpenMain(context.Background(), home)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := time.Unix(1_800_000_000, 0)
	j, err := NewJournal(JournalOptions{DB: db, Now: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	return db, j
}

// cycle is a strict cycle up to green, then a user switch to explore.
func cycle() []Event {
	return append(append([]Event{}, toGreen...), byUser(Explore))
}

func TestJournalRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, j := openJournal(t, t.TempDir())
	m := mustMachine(t, Options{})
	sess, err := Resume(ctx, j, m, "s1", Strict)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range cycle() {
		if _, err := sess.Apply(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// A refused event stores nothing.
	if _, err := sess.SwitchMode(ctx, Strict, Actor{Kind: ActorModel}, "let me"); !errors.Is(err, ErrNotUser) {
		t.Fatalf("model switch: %v", err)
	}
	s, recs, head, err := j.Load(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != Green || s.Mode != Explore || s.Seq != int64(len(cycle())+1) || len(recs) != len(cycle())+1 {
		t.Fatalf("loaded %+v with %d records", s, len(recs))
	}
	if recs[len(recs)-1].Hash != sess.Head() || len(head) != 32 {
		t.Errorf("head mismatch")
	}
	// A second Session on a stale view cannot append.
	stale := &Session{ID: "s1", machine: m, journal: j, status: Status{Mode: Strict, State: Idle, Seq: 1}, head: make([]byte, 32)}
	if _, err := stale.Apply(ctx, wDoc("README.md")); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale append: %v", err)
	}
	ids, err := j.Sessions(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "s1" {
		t.Fatalf("sessions %v %v", ids, err)
	}
}

// TestCrashResume writes transitions in a child process that kills itself
// with SIGKILL, without closing the database, then reopens it here.
func TestCrashResume(t *testing.T) {
	if os.Getenv("FLUFFY_TDD_CRASH_HOME") != "" {
		crashChild()
		return
	}
	home := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashResume$")
	cmd.Env = append(os.Environ(), "FLUFFY_TDD_CRASH_HOME="+home)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	ctx := context.Background()
	_, j := openJournal(t, home)
	sess, err := Resume(ctx, j, mustMachine(t, Options{}), "crash", Strict)
	if err != nil {
		t.Fatal(err)
	}
	s := sess.Status()
	if s.State != Implementing || s.Mode != Strict || s.RedSeq == 0 || s.Seq != 4 {
		t.Fatalf("resumed in %+v, want implementing after 4 transitions", s)
	}
	// And the session goes on from there.
	if tr, err := sess.Apply(ctx, pass()); err != nil || tr.To != Green {
		t.Fatalf("after resume: %v %v", tr.To, err)
	}
}

func crashChild() {
	ctx := context.Background()
	db, err := store.OpenMain(ctx, os.Getenv("FLUFFY_TDD_CRASH_HOME"))
	if err != nil {
		panic(err)
	}
	j, _ := NewJournal(JournalOptions{DB: db})
	m, _ := New(Options{})
	sess, err := Resume(ctx, j, m, "crash", Strict)
	if err != nil {
		panic(err)
	}
	for _, ev := range toImpl {
		if _, err := sess.Apply(ctx, ev); err != nil {
			panic(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// TestTamperDetected edits the stored history with raw SQL, as someone
// with the database file could, and expects Load to refuse it.
func TestTamperDetected(t *testing.T) {
	cases := map[string]string{
		"edit an event":          `UPDATE tdd_transitions SET event = replace(event, '"failed"', '"passed"') WHERE seq = 3`,
		"edit a state column":    `UPDATE tdd_transitions SET to_state = 'green' WHERE seq = 4`,
		"edit the mode":          `UPDATE tdd_transitions SET mode = 'explore' WHERE seq = 1`,
		"delete a middle row":    `DELETE FROM tdd_transitions WHERE seq = 3`,
		"swap two rows":          `UPDATE tdd_transitions SET seq = 1000 WHERE seq = 2; UPDATE tdd_transitions SET seq = 2 WHERE seq = 3; UPDATE tdd_transitions SET seq = 3 WHERE seq = 1000`,
		"edit a status hash":     `UPDATE tdd_transitions SET status_hash = zeroblob(32) WHERE seq = 2`,
		"edit a timestamp":       `UPDATE tdd_transitions SET at = at + 1 WHERE seq = 2`,
		"non-canonical event":    `UPDATE tdd_transitions SET event = ' ' || event WHERE seq = 2`,
		"unknown field in event": `UPDATE tdd_transitions SET event = replace(event, '{"kind"', '{"x":1,"kind"') WHERE seq = 2`,
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db, j := openJournal(t, t.TempDir())
			sess, err := Resume(ctx, j, mustMachine(t, Options{}), "s", Strict)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range toGreen {
				if _, err := sess.Apply(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, _, err := j.Load(ctx, "s"); err != nil {
				t.Fatalf("untouched journal: %v", err)
			}
			res, err := db.ExecContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				t.Fatalf("tamper query changed nothing")
			}
			_, _, _, err = j.Load(ctx, "s")
			var te *TamperError
			if !errors.Is(err, ErrTampered) || !errors.As(err, &te) || te.Seq == 0 {
				t.Fatalf("Load after %s: %v, want a TamperError", name, err)
			}
			if _, err := Resume(ctx, j, mustMachine(t, Options{}), "s", Strict); !errors.Is(err, ErrTampered) {
				t.Fatalf("Resume after tampering: %v", err)
			}
		})
	}
}

func TestJournalNeedsDB(t *testing.T) {
	if _, err := NewJournal(JournalOptions{}); err == nil || !strings.Contains(err.Error(), "DB is required") {
		t.Fatalf("err = %v", err)
	}
}

func BenchmarkStep(b *testing.B) {
	s := Status{Mode: Strict, State: Implementing, Seq: 5, RedSeq: 3, CycleTests: []string{"calc_test.go"}}
	ev := wSrc("calc.go")
	for b.Loop() {
		if _, err := Step(s, ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllowed(b *testing.B) {
	m := mustMachine(b, Options{})
	s := Status{Mode: Strict, State: Idle, Seq: 1}
	op := writeOp("/ws", "/ws/internal/calc/calc.go")
	for b.Loop() {
		if d := m.Allowed(s, op); d.Allow {
			b.Fatal("allowed")
		}
	}
}

func BenchmarkJournalAppend(b *testing.B) {
	ctx := context.Background()
	_, j := openJournal(b, b.TempDir())
	sess, err := Resume(ctx, j, mustMachine(b, Options{}), "bench", Strict)
	if err != nil {
		b.Fatal(err)
	}
	ev := wDoc("README.md")
	for b.Loop() {
		if _, err := sess.Apply(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJournalLoad1000(b *testing.B) {
	ctx := context.Background()
	_, j := openJournal(b, b.TempDir())
	sess, err := Resume(ctx, j, mustMachine(b, Options{}), "bench", Strict)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 999; i++ {
		if _, err := sess.Apply(ctx, wDoc("README.md")); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, _, _, err := j.Load(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWroteRefusedIsNotStored: a write the gate would refuse (seen after a
// command ran) is refused and leaves the journal as it was.
func TestWroteRefusedIsNotStored(t *testing.T) {
	ctx := context.Background()
	_, j := openJournal(t, t.TempDir())
	sess, err := Resume(ctx, j, mustMachine(t, Options{}), "w", Strict)
	if err != nil {
		t.Fatal(err)
	}
	head := sess.Head()
	if _, err := sess.Wrote(ctx, writeOp("/ws", "/ws/calc.go")); !errors.Is(err, ErrGuard) {
		t.Fatalf("Wrote(source in idle) = %v, want ErrGuard", err)
	}
	if sess.Head() != head || sess.Status().Seq != 1 {
		t.Fatal("a refused write changed the session")
	}
	if _, recs, _, err := j.Load(ctx, "w"); err != nil || len(recs) != 1 {
		t.Fatalf("journal after a refused write: %d records, %v", len(recs), err)
	}
	if tr, err := sess.Wrote(ctx, writeOp("/ws", "/ws/calc_test.go")); err != nil || tr.To != WritingTest {
		t.Fatalf("Wrote(test) = %v, %v", tr.To, err)
	}
}

// TestSessionAllowedMatchesMachine: Session.Allowed (which judges
// non-writes on the mode and state alone) answers exactly as
// Machine.Allowed on the whole status, for every action, in states with
// cycle tests, debt and instrumentation recorded.
func TestSessionAllowedMatchesMachine(t *testing.T) {
	ctx := context.Background()
	_, j := openJournal(t, t.TempDir())
	m := mustMachine(t, Options{})
	sess, err := Resume(ctx, j, m, "s1", Strict)
	if err != nil {
		t.Fatal(err)
	}
	ops := []operation.Operation{
		{Action: operation.Read}, {Action: operation.Exec, Argv: []string{"go", "test"}}, {Action: operation.Net},
		{Action: operation.Secret}, {Action: operation.Message}, {Action: "teleport"}, {Action: ""},
		{Action: operation.Write}, writeOp("/ws", "/ws/calc.go"), writeOp("/ws", "/ws/calc_test.go"),
	}
	for i := range ops {
		ops[i].Session.Workspace = "/ws"
	}
	steps := append(append([]Event{}, toGreen...), byUser(Explore), wSrc("other.go"), byUser(Debug), instrument("calc.go"))
	for i := 0; i <= len(steps); i++ {
		for _, op := range ops {
			got, want := sess.Allowed(op), m.Allowed(sess.Status(), op)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after %d events, %s: Session.Allowed %+v, Machine.Allowed %+v", i, op.Action, got, want)
			}
		}
		if i < len(steps) {
			if _, err := sess.Apply(ctx, steps[i]); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
	}
}
