package tdd

import (
	"testing"

	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// eventAlphabet is what a fuzzed session can do: every event kind, with
// test and source files, failures in and out of the cycle's test, user
// and model mode switches.
var eventAlphabet = []Event{
	wTest("calc_test.go"), wTest("other_test.go"), wSrc("calc.go"), wDoc("README.md"),
	failIn("calc_test.go"), failIn("unrelated_test.go"), buildFailIn("calc_test.go"),
	pass(), noTests(), done(0), done(10000),
	instrument("calc.go"), wInst("calc.go"),
	byUser(Strict), byUser(Explore), byUser(Debug), byModel(Strict), byModel(Explore),
	{Kind: EventTestRun, Run: &Run{Outcome: testrun.Failed, Failed: 1}},
	{Kind: EventTestRun, Run: &Run{Outcome: "green-ish"}},
}

// FuzzStrictDone: no sequence of events reaches done in strict mode unless,
// since the cycle's last test write, a failing run was recorded and a
// passing run came after it. The oracle is computed from the accepted
// events alone, independently of the machine's own bookkeeping.
func FuzzStrictDone(f *testing.F) {
	f.Add([]byte{0, 4, 2, 7, 9})           // the happy path
	f.Add([]byte{2, 7, 9})                 // code first
	f.Add([]byte{0, 7, 9})                 // test passes at once
	f.Add([]byte{14, 2, 7, 13, 9})         // explore, code, back to strict
	f.Add([]byte{0, 5, 2, 7, 9, 16, 2, 9}) // unrelated failure, model switch
	f.Add([]byte{0, 6, 2, 7, 2, 4, 7, 9, 0, 4, 1, 7, 9})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 200 {
			prog = prog[:200]
		}
		s := run(t, start(Strict))
		var sawRed, sawGreenAfterRed bool
		for _, b := range prog {
			ev := eventAlphabet[int(b)%len(eventAlphabet)]
			tr, err := Step(s, ev)
			if err != nil {
				continue
			}
			switch {
			case ev.Kind == EventWrite && ev.Files[0].Class == ClassTest:
				// Any test write outside writing_test opens a new
				// cycle or invalidates the red.
				if s.State != WritingTest {
					sawRed, sawGreenAfterRed = false, false
				}
			case ev.Kind == EventTestRun && ev.Run.Outcome == testrun.Failed && tr.To == Red:
				sawRed, sawGreenAfterRed = true, false
			case ev.Kind == EventTestRun && ev.Run.Outcome == testrun.Passed && sawRed:
				sawGreenAfterRed = true
			}
			if tr.To == Done && tr.Mode == Strict && !(sawRed && sawGreenAfterRed) {
				t.Fatalf("reached done in strict mode without a failing then passing test: %v", prog)
			}
			if tr.Mode != s.Mode && (ev.By == nil || ev.By.Kind != ActorUser) {
				t.Fatalf("mode changed by %+v", ev.By)
			}
			s = tr.Status
		}
	})
}

// TestStrictDoneExhaustive runs every sequence of up to 6 events from the
// alphabet (20^6 would be too many; the first 10 events cover the strict
// cycle) through the same oracle.
func TestStrictDoneExhaustive(t *testing.T) {
	const n, depth = 10, 6
	var walk func(s Status, red, green bool, d int)
	count := 0
	walk = func(s Status, red, green bool, d int) {
		count++
		if d == depth {
			return
		}
		for i := 0; i < n; i++ {
			ev := eventAlphabet[i]
			tr, err := Step(s, ev)
			if err != nil {
				continue
			}
			r, g := red, green
			switch {
			case ev.Kind == EventWrite && ev.Files[0].Class == ClassTest && s.State != WritingTest:
				r, g = false, false
			case ev.Kind == EventTestRun && tr.To == Red:
				r, g = true, false
			case ev.Kind == EventTestRun && ev.Run.Outcome == testrun.Passed && r:
				g = true
			}
			if tr.To == Done && !(r && g) {
				t.Fatalf("done without red then green after %d steps", d+1)
			}
			walk(tr.Status, r, g, d+1)
		}
	}
	walk(run(t, start(Strict)), false, false, 0)
	if count < 1000 {
		t.Fatalf("explored only %d states", count)
	}
}
