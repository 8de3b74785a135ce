package wiring

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/operation"
)

const netRules = "rules:\n" +
	"  - id: local-api\n    effect: allow\n    match: {action: net, host: \"127.0.0.1:8080\"}\n" +
	"  - id: no-evil\n    effect: block\n    message: not that one\n    match: {action: net, host: \"evil.test\"}\n"

// TestSessionNetDecide: each destination is decided by the live policy
// in force when the request arrives: an allow by a rule lets it through,
// block and approve refuse it naming the rule (approve saying how the
// person can allow it), and an edit that drops the rule refuses the next
// request.
func TestSessionNetDecide(t *testing.T) {
	f := newLiveFixture(t, false)
	f.write(t, netRules)
	n := &sessionNet{u: f.live.u, live: f.live, ws: f.ws, session: "s1", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := t.Context()
	c := n.forCall(ctx, "c1")
	if v := c.decide(ctx, "127.0.0.1", 8080); !v.Allow || v.Rule != "local-api" {
		t.Fatalf("allowed host: %+v", v)
	}
	if v := c.decide(ctx, "127.0.0.1", 8081); v.Allow || v.Rule != "default.network" || !strings.Contains(v.Reason, `host: "127.0.0.1:8081"`) {
		t.Fatalf("host no rule allows: %+v", v)
	}
	if v := c.decide(ctx, "evil.test", 80); v.Allow || v.Rule != "no-evil" || v.Reason != "not that one" {
		t.Fatalf("blocked host: %+v", v)
	}
	f.write(t, "rules: []\n")
	if v := c.decide(ctx, "127.0.0.1", 8080); v.Allow {
		t.Fatalf("after the rule was removed: %+v", v)
	}
	// No rule names a host: no proxy at all.
	eg, err := n.egress(ctx, "c1")
	if err != nil || eg != nil {
		t.Fatalf("egress without a host rule: %v, %v; want none", eg, err)
	}
}

func TestNamesLoopback(t *testing.T) {
	for pats, want := range map[string]bool{
		"127.0.0.1:8080":    true,
		"127.0.0.2":         true,
		"localhost:*":       true,
		"127.*:80":          true,
		"api.example.com":   false,
		"*.example.com:443": false,
		"10.0.0.1:80":       false,
	} {
		if got := namesLoopback(strings.Fields(pats)); got != want {
			t.Errorf("namesLoopback(%q) = %v, want %v", pats, got, want)
		}
	}
}

// askRules send proxy.test:443 to a person and block evil.test.
const askRules = "rules:\n" +
	"  - id: registry\n    effect: approve\n    match: {action: net, host: \"proxy.test:443\"}\n" +
	"  - id: no-evil\n    effect: block\n    message: not that one\n    match: {action: net, host: \"evil.test\"}\n"

// netAsk is a session's network over a live policy and a real approval
// broker whose questions arrive on asked.
type netAsk struct {
	f      *liveFixture
	broker *approval.Broker
	asked  chan approval.Request
	events *approvalEvents
}

type approvalEvents struct {
	mu   sync.Mutex
	list []approval.Event
}

func (r *approvalEvents) Record(_ context.Context, ev approval.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, ev)
	return nil
}

type chanNotifier chan approval.Request

func (c chanNotifier) Notify(_ context.Context, req approval.Request) error {
	c <- req
	return nil
}

func newNetAsk(t *testing.T, timeout time.Duration) *netAsk {
	t.Helper()
	a := &netAsk{f: newLiveFixture(t, false), asked: make(chan approval.Request, 16), events: &approvalEvents{}}
	a.f.write(t, askRules)
	var err error
	a.broker, err = approval.NewBroker(approval.Options{Evaluator: approval.PolicyEvaluator{Engine: a.f.live},
		Notifier: chanNotifier(a.asked), Recorder: a.events, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// session is session id's network.
func (a *netAsk) session(id string) *sessionNet {
	return &sessionNet{u: a.f.live.u, live: a.f.live, ws: a.f.ws, session: id, approver: a.broker,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// decide runs c.decide in the background; its verdict arrives on the
// returned channel.
func decideAsync(ctx context.Context, c *callNet, host string, port int) <-chan netproxy.Verdict {
	out := make(chan netproxy.Verdict, 1)
	go func() { out <- c.decide(ctx, host, port) }()
	return out
}

// question waits for the next question to the person.
func (a *netAsk) question(t *testing.T) approval.Request {
	t.Helper()
	select {
	case req := <-a.asked:
		return req
	case <-time.After(stuck):
		t.Fatal("no question reached the person")
	}
	return approval.Request{}
}

// stuck bounds a wait that only a bug makes long (a failure, not a
// measure).
const stuck = 30 * time.Second

// verdict waits for a verdict decideAsync delivers.
func verdict(t *testing.T, got <-chan netproxy.Verdict) netproxy.Verdict {
	t.Helper()
	select {
	case v := <-got:
		return v
	case <-time.After(stuck):
		t.Fatal("the request is still waiting")
	}
	return netproxy.Verdict{}
}

// noQuestion checks that nobody was asked.
func (a *netAsk) noQuestion(t *testing.T, what string) {
	t.Helper()
	select {
	case req := <-a.asked:
		t.Fatalf("%s: the person was asked: %s", what, req.Prompt())
	default:
	}
}

func (a *netAsk) answer(t *testing.T, req approval.Request, text string) {
	t.Helper()
	if err := a.broker.Answer(t.Context(), req.ID, text, approval.Who{Name: "person", Channel: "test"}); err != nil {
		t.Fatal(err)
	}
}

// TestSessionNetApprovalAsksThePerson: a destination the policy sends to
// approval waits for the person, who is shown the net.connect operation
// and which call of which session wants it. Approved once lets that
// request through and the next one asks again; a denial is a refusal
// naming the rule and the person's words.
func TestSessionNetApprovalAsksThePerson(t *testing.T) {
	a := newNetAsk(t, time.Hour)
	ctx := t.Context()
	c := a.session("s1").forCall(ctx, "call-7")
	got := decideAsync(ctx, c, "proxy.test", 443)
	req := a.question(t)
	if req.Session != "s1" || !strings.Contains(req.Summary, "call call-7 of session s1 wants to reach proxy.test:443 (rule registry)") {
		t.Fatalf("question: %+v", req)
	}
	if len(req.Items) != 1 || req.Items[0].Op.Tool != NetConnectTool || req.Items[0].Op.Action != operation.Net ||
		!slices.Equal(req.Items[0].Op.Hosts, []operation.Host{{Name: "proxy.test", Port: 443}}) || req.Items[0].Eval.Rule != "registry" {
		t.Fatalf("question's step: %+v", req.Items)
	}
	a.answer(t, req, "/approve")
	if v := verdict(t, got); !v.Allow || v.Rule != "registry" {
		t.Fatalf("approved: %+v", v)
	}

	got = decideAsync(ctx, c, "proxy.test", 443)
	req = a.question(t)
	a.answer(t, req, "/deny not today")
	v := verdict(t, got)
	if v.Allow || v.Rule != "registry" || !strings.Contains(v.Reason, "the person did not approve proxy.test:443") || !strings.Contains(v.Reason, "not today") {
		t.Fatalf("denied: %+v", v)
	}
	// The denial stands for the rest of the command: no new question.
	if again := verdict(t, decideAsync(ctx, c, "proxy.test", 443)); again != v {
		t.Fatalf("after the denial: %+v", again)
	}
	a.noQuestion(t, "a request after a denial in the same call")
	// Another call asks again.
	got = decideAsync(ctx, a.session("s1").forCall(ctx, "call-8"), "proxy.test", 443)
	a.answer(t, a.question(t), "/deny")
	if v := verdict(t, got); v.Allow {
		t.Fatalf("another call: %+v", v)
	}
	// A blocked host is refused without asking.
	if v := c.decide(ctx, "evil.test", 443); v.Allow || v.Rule != "no-evil" {
		t.Fatalf("blocked: %+v", v)
	}
	a.noQuestion(t, "blocked host")
	a.events.mu.Lock()
	defer a.events.mu.Unlock()
	if n := len(a.events.list); n != 6 {
		t.Fatalf("%d approval events, want a request and a decision per question", n)
	}
}

// TestSessionNetApprovalForSession: "/approve 1 for session" lets later
// requests of that session to that host and port through without asking,
// and nothing else: another port, another host, another session and the
// same destination after a policy change are asked again.
func TestSessionNetApprovalForSession(t *testing.T) {
	a := newNetAsk(t, time.Hour)
	a.f.write(t, askRules+"  - id: any-proxy\n    effect: approve\n    match: {action: net, host: \"*proxy.test:*\"}\n")
	ctx := t.Context()
	s1 := a.session("s1")
	got := decideAsync(ctx, s1.forCall(ctx, "c1"), "proxy.test", 443)
	a.answer(t, a.question(t), "/approve 1 for session")
	if v := verdict(t, got); !v.Allow {
		t.Fatalf("approved for session: %+v", v)
	}
	// Another call of the same session: through, nobody asked.
	if v := s1.forCall(ctx, "c2").decide(ctx, "proxy.test", 443); !v.Allow || v.Rule != "registry" {
		t.Fatalf("covered request: %+v", v)
	}
	a.noQuestion(t, "covered request")

	for _, tc := range []struct {
		what, session, host string
		port                int
	}{
		{"another port", "s1", "proxy.test", 80},
		{"another host", "s1", "evilproxy.test", 443},
		{"another session", "s2", "proxy.test", 443},
	} {
		got := decideAsync(ctx, a.session(tc.session).forCall(ctx, "c3"), tc.host, tc.port)
		req := a.question(t)
		if req.Session != tc.session || req.Items[0].Op.Hosts[0] != (operation.Host{Name: tc.host, Port: tc.port}) {
			t.Fatalf("%s: question %+v", tc.what, req)
		}
		a.answer(t, req, "/deny")
		if v := verdict(t, got); v.Allow {
			t.Fatalf("%s: let through: %+v", tc.what, v)
		}
	}

	// A policy change: the approval no longer counts.
	a.f.write(t, askRules+"  - id: another\n    effect: approve\n    match: {action: net, host: \"other.test:443\"}\n")
	got = decideAsync(ctx, s1.forCall(ctx, "c4"), "proxy.test", 443)
	req := a.question(t)
	if !strings.Contains(req.Items[0].Eval.Reason, "policy changed") {
		t.Fatalf("asked again without saying why: %+v", req.Items[0].Eval)
	}
	a.answer(t, req, "/deny")
	if v := verdict(t, got); v.Allow {
		t.Fatalf("after a policy change: %+v", v)
	}
}

// TestSessionNetApprovalCoalesces: concurrent requests of one command to
// one destination ask the person once and share the answer; a later
// request asks again.
func TestSessionNetApprovalCoalesces(t *testing.T) {
	a := newNetAsk(t, time.Hour)
	ctx := t.Context()
	c := a.session("s1").forCall(ctx, "c1")
	const n = 5
	var verdicts []<-chan netproxy.Verdict
	verdicts = append(verdicts, decideAsync(ctx, c, "proxy.test", 443))
	req := a.question(t)
	for range n - 1 {
		verdicts = append(verdicts, decideAsync(ctx, c, "proxy.test", 443))
	}
	// Wait until every other request has joined the open question.
	for {
		select {
		case again := <-a.asked:
			t.Fatalf("a concurrent request asked again: %s", again.Summary)
		default:
		}
		c.mu.Lock()
		joined := 0
		if q := c.asking["proxy.test:443"]; q != nil {
			joined = q.waiters
		}
		c.mu.Unlock()
		if joined == n-1 {
			break
		}
		runtime.Gosched()
	}
	a.answer(t, req, "/approve")
	for _, got := range verdicts {
		if v := verdict(t, got); !v.Allow {
			t.Fatalf("coalesced request: %+v", v)
		}
	}
	a.noQuestion(t, "concurrent requests")
	got := decideAsync(ctx, c, "proxy.test", 443)
	a.answer(t, a.question(t), "/deny")
	if v := verdict(t, got); v.Allow {
		t.Fatalf("a later request after an approval once: %+v", v)
	}
}

// TestSessionNetApprovalEnds: a question nobody answers in time, or whose
// call ends, is denied and recorded so; the request refuses naming the
// rule.
func TestSessionNetApprovalEnds(t *testing.T) {
	a := newNetAsk(t, time.Nanosecond)
	ctx := t.Context()
	v := a.session("s1").forCall(ctx, "c1").decide(ctx, "proxy.test", 443)
	if v.Allow || v.Rule != "registry" || !strings.Contains(v.Reason, "no answer within") {
		t.Fatalf("timed out: %+v", v)
	}

	a = newNetAsk(t, time.Hour)
	callCtx, cancel := context.WithCancel(ctx)
	got := decideAsync(ctx, a.session("s1").forCall(callCtx, "c2"), "proxy.test", 443)
	a.question(t)
	cancel()
	v = verdict(t, got)
	if v.Allow || v.Rule != "registry" || !strings.Contains(v.Reason, "stopped waiting") {
		t.Fatalf("call ended: %+v", v)
	}
	if p := a.broker.Pending(""); len(p) != 0 {
		t.Fatalf("still pending: %+v", p)
	}
	a.events.mu.Lock()
	defer a.events.mu.Unlock()
	last := a.events.list[len(a.events.list)-1]
	if last.Kind != "approval.decision" || last.Who.Name != "cancel" || last.Items[0].Decision.Verdict != approval.Denied {
		t.Fatalf("last event: %+v", last)
	}
}
