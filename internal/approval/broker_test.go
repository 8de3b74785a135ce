package approval

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// tableEvaluator decides by the first argv word (or the tool name): a tiny
// but real policy, so tests exercise the broker's handling of each effect.
type tableEvaluator map[string]Evaluation

func (t tableEvaluator) Evaluate(_ context.Context, op operation.Operation) (Evaluation, error) {
	key := op.Tool
	if len(op.Argv) > 0 {
		key = op.Argv[0]
	}
	if key == "explode" {
		return Evaluation{}, errors.New("cel: no such attribute")
	}
	if ev, ok := t[key]; ok {
		return ev, nil
	}
	return Evaluation{Effect: EffectApprove, Rule: "default", Reason: "nothing matched"}, nil
}

// inbox is a Notifier that keeps what it was shown.
type inbox struct {
	mu   sync.Mutex
	reqs []Request
	ch   chan Request
	fail error
}

func newInbox() *inbox { return &inbox{ch: make(chan Request, 16)} }

func (n *inbox) Notify(_ context.Context, r Request) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return n.fail
	}
	n.reqs = append(n.reqs, r)
	n.ch <- r
	return nil
}

// journal is a Recorder that keeps events and can be made to fail.
type journal struct {
	mu     sync.Mutex
	events []Event
	fail   error
}

func (j *journal) Record(_ context.Context, ev Event) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		return j.fail
	}
	j.events = append(j.events, ev)
	return nil
}

func (j *journal) kinds() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, e := range j.events {
		out = append(out, e.Kind+"/"+e.Who.Name)
	}
	return out
}

func cmd(argv ...string) Step {
	return Step{Op: operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: argv}, Preview: strings.Join(argv, " ")}
}

var testPolicy = tableEvaluator{
	"ls":   {Effect: EffectAllow, Rule: "read-only", Reason: "lists files"},
	"curl": {Effect: EffectApprove, Rule: "net", Reason: "network access"},
	"rm":   {Effect: EffectApprove, Rule: "destructive", Reason: "deletes files"},
	"dd":   {Effect: EffectBlock, Rule: "raw-disk", Reason: "writes devices"},
}

func newBroker(t *testing.T, timeout time.Duration) (*Broker, *inbox, *journal) {
	t.Helper()
	n, j := newInbox(), &journal{}
	b, err := NewBroker(Options{Evaluator: testPolicy, Notifier: n, Recorder: j, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return b, n, j
}

type result struct {
	req Request
	err error
}

func ask(b *Broker, ctx context.Context, session string, steps ...Step) chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := b.Ask(ctx, session, "tidy up", steps)
		ch <- result{r, err}
	}()
	return ch
}

func verdictsOf(r Request) string {
	return verdicts(Answer{Steps: func() []Decision {
		var ds []Decision
		for _, it := range r.Items {
			ds = append(ds, it.Decision)
		}
		return ds
	}()})
}

func TestMixedPlanPartialAnswers(t *testing.T) {
	b, n, j := newBroker(t, time.Minute)
	done := ask(b, t.Context(), "s1", cmd("ls"), cmd("curl", "example.com"), cmd("dd", "if=/dev/zero"), cmd("rm", "-rf", "build"))
	first := <-n.ch
	prompt := first.Prompt()
	for _, want := range []string{
		"Needs your approval:\n  2. shell.exec argv [\"curl\" \"example.com\"] — rule net: network access\n       curl example.com\n  4.",
		"Already allowed:\n  1. shell.exec",
		"Blocked (cannot be approved):\n  3. shell.exec argv [\"dd\" \"if=/dev/zero\"] — blocked by rule raw-disk: writes devices",
		"Approval " + first.ID + " for session s1: tidy up",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	// A blocked step cannot be approved, and the refusal changes nothing.
	if err := b.Answer(t.Context(), first.ID, "/approve 3", Who{"ana", "cli"}); err == nil || !strings.Contains(err.Error(), "blocked by rule raw-disk") {
		t.Fatalf("approving a blocked step: %v", err)
	}
	if err := b.Answer(t.Context(), first.ID, "/approve 1", Who{"ana", "cli"}); err == nil || !strings.Contains(err.Error(), "already approved") {
		t.Fatalf("re-deciding an allowed step: %v", err)
	}
	// A partial answer leaves step 4 open and asks again about it.
	if err := b.Answer(t.Context(), first.ID, "/approve 2", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	again := <-n.ch
	if got := verdictsOf(again); got != "AADP" {
		t.Fatalf("after /approve 2: %s, want AADP", got)
	}
	if !strings.Contains(again.Prompt(), "Decided:\n  2.") {
		t.Errorf("re-asked prompt does not show the decided step:\n%s", again.Prompt())
	}
	if err := b.Answer(t.Context(), first.ID, "/deny 4 keep the build dir", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got := verdictsOf(res.req); got != "AADD" {
		t.Errorf("final verdicts %s, want AADD", got)
	}
	if res.req.Items[3].Decision.Reason != "keep the build dir" {
		t.Errorf("denial reason lost: %+v", res.req.Items[3].Decision)
	}
	if got := strings.Join(j.kinds(), ","); got != "approval.request/agent,approval.decision/ana,approval.decision/ana" {
		t.Errorf("recorded %s", got)
	}
	if len(b.Pending("")) != 0 {
		t.Error("finished request still pending")
	}
}

func TestApproveAllSkipsBlocked(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	done := ask(b, t.Context(), "s", cmd("rm", "x"), cmd("dd"), cmd("curl", "h"))
	r := <-n.ch
	if err := b.Answer(t.Context(), r.ID, "/approve", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	if got := verdictsOf((<-done).req); got != "ADA" {
		t.Errorf("/approve over a plan with a blocked step: %s, want ADA", got)
	}
}

func TestOnlyDeniesTheRest(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	done := ask(b, t.Context(), "s", cmd("rm", "a"), cmd("rm", "b"), cmd("curl", "c"))
	r := <-n.ch
	if err := b.Answer(t.Context(), r.ID, "/approve 1 only", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	if got := verdictsOf((<-done).req); got != "ADD" {
		t.Errorf("got %s, want ADD", got)
	}
}

func TestTimeoutDenies(t *testing.T) {
	b, n, j := newBroker(t, 50*time.Millisecond)
	done := ask(b, t.Context(), "s", cmd("rm", "x"), cmd("ls"))
	<-n.ch
	res := <-done
	if got := verdictsOf(res.req); got != "DA" {
		t.Fatalf("after timeout: %s, want DA", got)
	}
	if !strings.Contains(res.req.Items[0].Decision.Reason, "no answer within 50ms") {
		t.Errorf("reason %q", res.req.Items[0].Decision.Reason)
	}
	if k := j.kinds(); k[len(k)-1] != "approval.decision/timeout" {
		t.Errorf("timeout not recorded: %v", k)
	}
	if err := b.Answer(t.Context(), res.req.ID, "/approve", Who{"late", "cli"}); !errors.Is(err, ErrUnknownRequest) {
		t.Errorf("late answer: %v", err)
	}
}

func TestCancelDenies(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	done := ask(b, ctx, "s", cmd("rm", "x"))
	<-n.ch
	cancel()
	if got := verdictsOf((<-done).req); got != "D" {
		t.Errorf("after cancel: %s", got)
	}
}

func TestSessionScope(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	done := ask(b, t.Context(), "s1", cmd("curl", "example.com"))
	r := <-n.ch
	if err := b.Answer(t.Context(), r.ID, "/approve 1 for this session", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	<-done
	// The same operation in the same session is approved without asking.
	res, err := b.Ask(t.Context(), "s1", "again", []Step{cmd("curl", "example.com")})
	if err != nil || verdictsOf(res) != "S" {
		t.Fatalf("same op, same session: %s, %v", verdictsOf(res), err)
	}
	if len(n.ch) != 0 {
		t.Error("asked the person again for an operation approved for the session")
	}
	// Another argv, environment, directory, redirection or file content,
	// or another session, is asked again.
	with := func(f func(*operation.Operation)) Step {
		s := cmd("curl", "example.com")
		s.Op.Commands = []operation.Command{{Argv: s.Op.Argv}}
		f(&s.Op)
		return s
	}
	for _, c := range []struct {
		session string
		step    Step
	}{
		{"s1", cmd("curl", "evil.example")},
		{"s2", cmd("curl", "example.com")},
		{"s1", with(func(op *operation.Operation) { op.Commands[0].Env = []string{"HTTPS_PROXY=evil:80"} })},
		{"s1", with(func(op *operation.Operation) { op.Commands[0].Dir = "sub" })},
		{"s1", with(func(op *operation.Operation) { op.Commands[0].Writes = []string{"/w/out"} })},
		{"s1", with(func(op *operation.Operation) { op.Inputs = []operation.Input{{Path: "/w/curlrc", SHA256: "aa"}} })},
	} {
		done := ask(b, t.Context(), c.session, c.step)
		r := <-n.ch
		if err := b.Answer(t.Context(), r.ID, "/deny", Who{"ana", "cli"}); err != nil {
			t.Fatal(err)
		}
		if got := verdictsOf((<-done).req); got != "D" {
			t.Errorf("%s %v: %s", c.session, c.step.Op.Argv, got)
		}
	}
	// An operation whose files could not be bound is asked each time,
	// even after an approval "for session".
	unbound := cmd("curl", "example.com")
	unbound.Op.Unbound = "more than 64 files"
	for i := range 2 {
		done := ask(b, t.Context(), "s1", unbound)
		select {
		case res := <-done:
			t.Fatalf("unbound operation, ask %d: not asked (%s)", i+1, verdictsOf(res.req))
		case r := <-n.ch:
			if err := b.Answer(t.Context(), r.ID, "/approve 1 for session", Who{"ana", "cli"}); err != nil {
				t.Fatal(err)
			}
		}
		<-done
	}
	b.EndSession("s1")
	if b.CoveredForSession("s1", "", "net", cmd("curl", "example.com").Op.Signature()) {
		t.Error("session approvals survive the session")
	}
}

func TestTwoSessionsAtOnce(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	d1 := ask(b, t.Context(), "s1", cmd("rm", "one"))
	d2 := ask(b, t.Context(), "s2", cmd("rm", "two"))
	r1, r2 := <-n.ch, <-n.ch
	if r1.ID == r2.ID {
		t.Fatal("two requests share an id")
	}
	if len(b.Pending("")) != 2 || len(b.Pending(r1.Session)) != 1 {
		t.Fatalf("pending: %v", b.Pending(""))
	}
	// Answers go by id, from any client.
	byID := map[string]string{r1.ID: "/approve", r2.ID: "/deny no"}
	for id, text := range byID {
		if err := b.Answer(t.Context(), id, text, Who{"bo", "second-terminal"}); err != nil {
			t.Fatal(err)
		}
	}
	res1, res2 := <-d1, <-d2
	for _, res := range []result{res1, res2} {
		wantV := "D"
		if byID[res.req.ID] == "/approve" {
			wantV = "A"
		}
		if got := verdictsOf(res.req); got != wantV {
			t.Errorf("session %s: %s, want %s", res.req.Session, got, wantV)
		}
	}
}

func TestFailClosed(t *testing.T) {
	// A request that cannot be recorded is never shown.
	b, n, j := newBroker(t, time.Minute)
	j.fail = errors.New("disk full")
	if _, err := b.Ask(t.Context(), "s", "x", []Step{cmd("rm", "x")}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Ask with a failing recorder: %v", err)
	}
	if len(n.ch) != 0 || len(b.Pending("")) != 0 {
		t.Error("unrecorded request was shown or left pending")
	}
	// A decision that cannot be recorded does not count.
	j.fail = nil
	done := ask(b, t.Context(), "s", cmd("rm", "x"))
	r := <-n.ch
	j.fail = errors.New("disk full")
	if err := b.Answer(t.Context(), r.ID, "/approve", Who{"ana", "cli"}); err == nil {
		t.Fatal("unrecorded approval accepted")
	}
	if p := b.Pending("s"); len(p) != 1 || p[0].Items[0].Decision.Verdict != Pending {
		t.Fatalf("unrecorded approval changed the request: %+v", p)
	}
	j.fail = nil
	if err := b.Answer(t.Context(), r.ID, "/approve", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	<-done
	// An evaluator error blocks the step.
	res, err := b.Ask(t.Context(), "s", "x", []Step{cmd("explode")})
	if err != nil || verdictsOf(res) != "D" || res.Items[0].Eval.Rule != "evaluation-error" {
		t.Errorf("evaluator error: %s %+v %v", verdictsOf(res), res.Items[0].Eval, err)
	}
	// A notifier that fails leaves nothing pending.
	n.fail = errors.New("terminal gone")
	if _, err := b.Ask(t.Context(), "s", "x", []Step{cmd("rm", "y")}); err == nil {
		t.Error("Ask succeeded without reaching a person")
	}
	if len(b.Pending("")) != 0 {
		t.Error("request left pending after notify failed")
	}
}

func TestAllAllowedNeedsNobody(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	res, err := b.Ask(t.Context(), "s", "x", []Step{cmd("ls"), cmd("ls", "-l")})
	if err != nil || verdictsOf(res) != "AA" {
		t.Fatalf("%s %v", verdictsOf(res), err)
	}
	if len(n.ch) != 0 {
		t.Error("a person was asked about allowed steps")
	}
	if _, err := b.Ask(t.Context(), "s", "x", nil); err == nil {
		t.Error("empty plan accepted")
	}
	if err := b.Answer(t.Context(), "nope", "/approve", Who{}); !errors.Is(err, ErrUnknownRequest) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := NewBroker(Options{}); err == nil {
		t.Error("NewBroker without dependencies")
	}
}

func TestMalformedAnswerKeepsRequestOpen(t *testing.T) {
	b, n, _ := newBroker(t, time.Minute)
	done := ask(b, t.Context(), "s", cmd("rm", "x"))
	r := <-n.ch
	var se *SyntaxError
	if err := b.Answer(t.Context(), r.ID, "yes please", Who{"ana", "cli"}); !errors.As(err, &se) {
		t.Fatalf("malformed answer: %v", err)
	}
	if err := b.Answer(t.Context(), r.ID, "/approve", Who{"ana", "cli"}); err != nil {
		t.Fatal(err)
	}
	if got := verdictsOf((<-done).req); got != "A" {
		t.Error(got)
	}
}

// digestEvaluator answers approve under the policy whose digest it holds,
// which a test changes as a person would edit the policy file.
type digestEvaluator struct {
	mu     sync.Mutex
	digest string
}

func (d *digestEvaluator) Evaluate(context.Context, operation.Operation) (Evaluation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Evaluation{Effect: EffectApprove, Rule: "default", Reason: "nothing matched", Policy: d.digest}, nil
}

// TestSessionScopeBoundToPolicy: an approval "for session" counts under
// the policy it was given under only; after a change the person is asked
// again and told why, and the new answer counts under the new policy.
// Ending the session forgets both.
func TestSessionScopeBoundToPolicy(t *testing.T) {
	ev := &digestEvaluator{digest: "p1"}
	n := newInbox()
	b, err := NewBroker(Options{Evaluator: ev, Notifier: n, Recorder: &journal{}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	approveForSession := func() Request {
		t.Helper()
		done := ask(b, t.Context(), "s1", cmd("make", "install"))
		r := <-n.ch
		if err := b.Answer(t.Context(), r.ID, "/approve 1 for session", Who{"ana", "cli"}); err != nil {
			t.Fatal(err)
		}
		<-done
		return r
	}
	approveForSession()
	if res, err := b.Ask(t.Context(), "s1", "again", []Step{cmd("make", "install")}); err != nil || verdictsOf(res) != "S" {
		t.Fatalf("same policy: %s, %v", verdictsOf(res), err)
	}
	ev.mu.Lock()
	ev.digest = "p2"
	ev.mu.Unlock()
	r := approveForSession()
	if len(r.Items) != 1 || !strings.Contains(r.Items[0].Eval.Reason, "the policy changed since this approval") {
		t.Errorf("asked again without saying why: %+v", r.Items)
	}
	if !b.CoveredForSession("s1", "p2", "default", cmd("make", "install").Op.Signature()) {
		t.Error("the new approval does not count under the new policy")
	}
	if b.CoveredForSession("s1", "p1", "default", cmd("make", "install").Op.Signature()) {
		t.Error("an approval counts under a policy it was not given under")
	}
	b.EndSession("s1")
	if b.CoveredForSession("s1", "p2", "default", cmd("make", "install").Op.Signature()) {
		t.Error("session approvals survive the session")
	}
}

// gatedJournal holds each approval.decision until the test releases it.
type gatedJournal struct {
	journal
	arrived chan chan struct{}
}

func (g *gatedJournal) Record(ctx context.Context, ev Event) error {
	if ev.Kind == "approval.decision" && ev.Who.Channel != "kernel" {
		release := make(chan struct{})
		g.arrived <- release
		<-release
	}
	return g.journal.Record(ctx, ev)
}

// TestAnswerToADecidedRequest: two terminals answer one request at once;
// the second waits for the first to be recorded and applied, then finds
// the request decided and is told it is no longer open (ErrUnknownRequest,
// which a terminal takes as "answered elsewhere"): it is neither asked to
// answer again nor recorded as a decision that never applied.
func TestAnswerToADecidedRequest(t *testing.T) {
	n, g := newInbox(), &gatedJournal{arrived: make(chan chan struct{}, 2)}
	b, err := NewBroker(Options{Evaluator: testPolicy, Notifier: n, Recorder: g, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := ask(b, t.Context(), "s", cmd("rm", "x"))
	r := <-n.ch
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- b.Answer(t.Context(), r.ID, "/approve", Who{"ana", "cli"}) }()
	releaseFirst := <-g.arrived
	go func() { second <- b.Answer(t.Context(), r.ID, "/deny", Who{"bob", "ipc"}) }()
	// While the first is being recorded, the second must not reach the
	// recorder (it waits its turn); give it the time to try.
	select {
	case rel := <-g.arrived:
		close(rel)
		close(releaseFirst)
		<-first
		<-second
		t.Fatal("a second decision was recorded while the first was being recorded")
	case <-time.After(100 * time.Millisecond):
	}
	close(releaseFirst)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case rel := <-g.arrived:
		close(rel)
		<-second
		t.Fatal("the second answer recorded a decision that does not apply")
	case err := <-second:
		if !errors.Is(err, ErrUnknownRequest) {
			t.Fatalf("second answer: %v, want ErrUnknownRequest", err)
		}
	}
	if got := verdictsOf((<-done).req); got != "A" {
		t.Fatalf("decision %s, want the first answer's", got)
	}
	// Once decided, a late answer is refused before anything is recorded.
	if err := b.Answer(t.Context(), r.ID, "/deny", Who{"cy", "ipc"}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("late answer: %v", err)
	}
}

// TestUntrustedMemoryWriteAskedEachTime: a memory write held by the
// built-in rule for untrusted sessions is asked at every call, an
// approval "for session" of the very same write notwithstanding.
func TestUntrustedMemoryWriteAskedEachTime(t *testing.T) {
	n, j := newInbox(), &journal{}
	ev := tableEvaluator{"memory.write": {Effect: EffectApprove, Rule: policy.RuleUntrustedMemory, Reason: "untrusted"}}
	b, err := NewBroker(Options{Evaluator: ev, Notifier: n, Recorder: j, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	step := Step{Op: operation.Operation{Tool: "memory.write", Action: operation.Write, ArgsSHA256: "ab",
		Paths:   []operation.Path{{Abs: "/ws/memory/2026-11-20.md", InWorkspace: true}},
		Session: operation.Session{ID: "s1", Untrusted: true, UntrustedSource: "webhook github issue_comment"}}}
	for i := range 3 {
		done := ask(b, t.Context(), "s1", step)
		select {
		case res := <-done:
			t.Fatalf("ask %d: not asked (%s)", i+1, verdictsOf(res.req))
		case r := <-n.ch:
			if err := b.Answer(t.Context(), r.ID, "/approve 1 for session", Who{"ana", "cli"}); err != nil {
				t.Fatal(err)
			}
		}
		if res := <-done; verdictsOf(res.req) != "S" {
			t.Fatalf("ask %d: %s", i+1, verdictsOf(res.req))
		}
	}
	if b.CoveredForSession("s1", "", policy.RuleUntrustedMemory, step.Op.Signature()) {
		t.Error("the approval for session was remembered")
	}
}
