package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

const grantRules = `
rules:
  - id: destructive
    effect: approve
    message: deletes files
    match: {tool: shell.exec, argv: [rm, ...]}
  - id: net
    effect: approve
    message: network access
    match: {tool: shell.exec, argv: [curl, ...]}
  - id: raw-disk
    effect: block
    message: writes devices
    match: {tool: shell.exec, argv: [dd, ...]}
  - id: read-only
    effect: allow
    match: {tool: shell.exec, argv: [ls, ...]}
`

// clock is a settable time source shared by the engine's tokens and Grants.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type realPolicy struct {
	engine *policy.Engine
	tokens *policy.Tokens
	clock  *clock
}

func newRealPolicy(t testing.TB, rules string, cls policy.Classifier) realPolicy {
	t.Helper()
	c := &clock{t: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}
	toks, err := policy.NewTokens(bytes.Repeat([]byte{7}, 32), c.now)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.Compile(policy.Options{Tokens: toks, Classifier: cls, Home: "/home/u"},
		policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: []byte(rules)})
	if err != nil {
		t.Fatal(err)
	}
	return realPolicy{engine: e, tokens: toks, clock: c}
}

func shellOp(session string, argv ...string) operation.Operation {
	return operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: argv,
		Session: operation.Session{ID: session, Workspace: "/w"}}
}

// TestTokensFromApprovals drives the real policy engine: a plan is
// pre-evaluated, a person approves, the approved steps become tokens, and
// executing the steps presents them to Decide.
func TestTokensFromApprovals(t *testing.T) {
	rp := newRealPolicy(t, grantRules, nil)
	n, j := newInbox(), &journal{}
	b, err := NewBroker(Options{Evaluator: PolicyEvaluator{Engine: rp.engine}, Notifier: n, Recorder: j, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGrants(GrantOptions{Issuer: rp.tokens, TTL: 10 * time.Minute, Uses: 1, Now: rp.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	steps := []Step{
		{Op: shellOp("s1", "ls")},
		{Op: shellOp("s1", "rm", "-rf", "build")},
		{Op: shellOp("s1", "dd", "if=/dev/zero")},
		{Op: shellOp("s1", "curl", "example.com")},
	}
	ch := make(chan result, 1)
	go func() {
		r, err := b.Ask(ctx, "s1", "tidy", steps)
		ch <- result{r, err}
	}()
	req := <-n.ch
	if got := verdictsOf(req); got != "APDP" {
		t.Fatalf("pre-evaluation with the real engine: %s\n%s", got, req.Prompt())
	}
	if !strings.Contains(req.Prompt(), "blocked by rule raw-disk: writes devices") {
		t.Fatalf("prompt:\n%s", req.Prompt())
	}
	if err := b.Answer(ctx, req.ID, "/approve 2\n/approve 4 for session", Who{Name: "alice", Channel: "terminal"}); err != nil {
		t.Fatal(err)
	}
	res := <-ch
	if res.err != nil {
		t.Fatal(res.err)
	}
	toks, skipped, err := g.Mint(res.req, rp.engine.Digest())
	if err != nil || len(skipped) != 0 {
		t.Fatal(err, skipped)
	}
	if len(toks[2]) != 1 || len(toks[4]) != 1 || len(toks[1]) != 0 || len(toks[3]) != 0 {
		t.Fatalf("tokens by step: %v", toks)
	}
	decide := func(op operation.Operation) policy.Decision {
		g.Present(&op)
		return rp.engine.Decide(ctx, op)
	}

	// A different argv than approved is still asked about.
	for _, argv := range [][]string{{"rm", "-rf", "/"}, {"rm", "-rf", "build", "src"}, {"rm", "-rf"}, {"curl", "evil.example"}} {
		if d := decide(shellOp("s1", argv...)); d.Effect != policy.Approve {
			t.Errorf("%q with the approved tokens: %v, want approve", argv, d.Effect)
		}
		// Even when every token is presented, the engine refuses them.
		d := rp.engine.Decide(ctx, withTokens(shellOp("s1", argv...), append(append([]string(nil), toks[2]...), toks[4]...)))
		if d.Effect != policy.Approve || !matchedError(d, policy.ErrTokenScope) {
			t.Errorf("%q presenting every token: %v", argv, d)
		}
	}
	// Another session cannot use them.
	if d := rp.engine.Decide(ctx, withTokens(shellOp("s2", "rm", "-rf", "build"), toks[2])); d.Effect != policy.Approve {
		t.Errorf("another session's token: %v", d.Effect)
	}
	// The exact operation runs once on a single-use token.
	if d := decide(shellOp("s1", "rm", "-rf", "build")); d.Effect != policy.Allow || !strings.HasPrefix(d.Rule, "token:") {
		t.Fatalf("approved op: %v", d)
	}
	// Replaying the spent single-use token is refused.
	d := rp.engine.Decide(ctx, withTokens(shellOp("s1", "rm", "-rf", "build"), toks[2]))
	if d.Effect != policy.Approve || !matchedError(d, policy.ErrTokenSpent) {
		t.Fatalf("replayed token: %v", d)
	}
	// The "for session" step may run again, until the token expires.
	for range 3 {
		if d := decide(shellOp("s1", "curl", "example.com")); d.Effect != policy.Allow {
			t.Fatalf("session-scoped approval: %v", d)
		}
	}
	rp.clock.add(11 * time.Minute)
	d = rp.engine.Decide(ctx, withTokens(shellOp("s1", "curl", "example.com"), toks[4]))
	if d.Effect != policy.Approve || !matchedError(d, policy.ErrTokenExpired) {
		t.Fatalf("expired token: %v", d)
	}
	// Grants no longer presents expired tokens.
	op := shellOp("s1", "curl", "example.com")
	g.Present(&op)
	if len(op.Tokens) != 0 {
		t.Fatalf("expired tokens still presented: %d", len(op.Tokens))
	}
}

func withTokens(op operation.Operation, toks []string) operation.Operation {
	op.Tokens = append(op.Tokens, toks...)
	return op
}

func matchedError(d policy.Decision, want error) bool {
	for _, m := range d.Matched {
		if m.Error == want.Error() {
			return true
		}
	}
	return false
}

// TestTokensCoverPathsAndRedirections: a write is scoped to its exact
// path, and a command line's redirection target is part of what was
// approved.
func TestTokensCoverPathsAndRedirections(t *testing.T) {
	rp := newRealPolicy(t, `
rules:
  - id: writes
    effect: approve
    match: {action: write}
  - id: echo
    effect: approve
    match: {tool: shell.run, argv: [echo, ...]}
`, nil)
	g, err := NewGrants(GrantOptions{Issuer: rp.tokens, Uses: 5, Now: rp.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	write := func(p string) operation.Operation {
		return operation.Operation{Tool: "fs.write", Action: operation.Write, Paths: []operation.Path{{Abs: p, InWorkspace: true}}, Session: operation.Session{ID: "s", Workspace: "/w"}}
	}
	line := func(s string) operation.Operation {
		return operation.Operation{Tool: "shell.run", Action: operation.Exec, CommandLine: s, Session: operation.Session{ID: "s", Workspace: "/w"}}
	}
	req := Request{ID: "x", Session: "s", Items: []Item{
		{N: 1, Step: Step{Op: write("/w/a.txt")}, Eval: Evaluation{Effect: EffectApprove, Rule: "writes"}, Decision: Decision{Verdict: Approved}},
		{N: 2, Step: Step{Op: line("echo hi > out.log")}, Eval: Evaluation{Effect: EffectApprove, Rule: "echo"}, Decision: Decision{Verdict: Approved}},
		{N: 3, Step: Step{Op: write("/w/b.txt")}, Eval: Evaluation{Effect: EffectApprove, Rule: "writes"}, Decision: Decision{Verdict: Denied}},
	}}
	toks, skipped, err := g.Mint(req, rp.engine.Digest())
	if err != nil || len(skipped) != 0 || len(toks[3]) != 0 {
		t.Fatal(toks, skipped, err)
	}
	if len(toks[2]) != 2 {
		t.Fatalf("command with a redirection: %d tokens, want the command and the file", len(toks[2]))
	}
	ctx := t.Context()
	cases := []struct {
		op   operation.Operation
		want policy.Effect
	}{
		{write("/w/a.txt"), policy.Allow},
		{write("/w/b.txt"), policy.Approve},     // denied step
		{write("/w/a.txt.bak"), policy.Approve}, // other path
		{line("echo hi > out.log"), policy.Allow},
		{line("echo hi > other.log"), policy.Approve},
		{line("echo bye > out.log"), policy.Approve},
	}
	for _, c := range cases {
		op := c.op
		g.Present(&op)
		if d := rp.engine.Decide(ctx, op); d.Effect != c.want {
			t.Errorf("%s %v %q: %v, want %v", op.Tool, op.Paths, op.CommandLine, d.Effect, c.want)
		}
	}
}

func TestScopesRefusePatterns(t *testing.T) {
	for _, op := range []operation.Operation{
		shellOp("s", "rm", "*"),
		shellOp("s", "rm", "-rf", "..."),
		shellOp("", "rm", "x"),
		{Tool: "fs.write", Action: operation.Write, Paths: []operation.Path{{Abs: "/w/?"}}, Session: operation.Session{ID: "s"}},
		{Tool: "net.fetch", Action: operation.Net, Hosts: []operation.Host{{Name: "*.example.com"}}, Session: operation.Session{ID: "s"}},
		{Tool: "shell.run", Action: operation.Exec, CommandLine: "$X arg", Session: operation.Session{ID: "s"}},
	} {
		if _, err := Scopes(op); !errors.Is(err, ErrNotExact) {
			t.Errorf("%+v: %v, want ErrNotExact", op, err)
		}
	}
}

// TestAuditRecorder records through the real audit log and reads it back.
func TestAuditRecorder(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	l, err := audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := newInbox()
	b, err := NewBroker(Options{Evaluator: testPolicy, Notifier: n, Recorder: AuditRecorder{Log: l}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ch := ask(b, ctx, "s9", cmd("ls"), cmd("rm", "x"))
	req := <-n.ch
	if err := b.Answer(ctx, req.ID, "/deny 2 not now", Who{Name: "bob", Channel: "ipc"}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil {
		t.Fatal(r.err)
	}
	var got []string
	err = l.Reader().Entries(ctx, audit.Filter{Session: "s9"}, func(e audit.Entry) error {
		var ev Event
		raw, _ := e.Payload.(json.RawMessage)
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		got = append(got, string(e.Kind)+" "+e.Actor+" "+ev.RequestID+" "+string(ev.Items[1].Decision.Verdict))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"approval.request agent@kernel " + req.ID + " pending", "approval.decision bob@ipc " + req.ID + " denied"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit entries:\n%q\nwant\n%q", got, want)
	}
	if !audit.KindApprovalRequest.Synchronous() || !audit.KindApprovalDecision.Synchronous() {
		t.Fatal("approval kinds must be synchronous")
	}
	// A closed log fails the request closed: nothing is asked.
	_ = l.Close()
	if _, err := b.Ask(ctx, "s9", "again", []Step{cmd("rm", "y")}); err == nil {
		t.Fatal("Ask succeeded with a closed audit log")
	}
	select {
	case r := <-n.ch:
		t.Fatalf("asked although the request was not recorded: %s", r.ID)
	default:
	}
}

// FuzzScopes: operations come from the agent. Whatever Scopes accepts is
// an exact scope the token authority issues: no pattern character and no
// "..." reach a token.
func FuzzScopes(f *testing.F) {
	f.Add("rm -rf build", "/w/a.txt", "example.com", 443)
	f.Add("echo x > out.log", "/w/*", "*.example.com", 0)
	f.Add("sudo -u root env X=1 rm ...", "/w/../x", "a:b", 80)
	toks, err := policy.NewTokens(bytes.Repeat([]byte{3}, 32), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line, path, host string, port int) {
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: line,
			Session: operation.Session{ID: "s", Workspace: "/w"}}
		if path != "" {
			op.Paths = []operation.Path{{Abs: path}}
		}
		if host != "" {
			op.Hosts = []operation.Host{{Name: host, Port: port & 0xffff}}
		}
		scopes, err := Scopes(op)
		if err != nil {
			if !errors.Is(err, ErrNotExact) {
				t.Fatalf("error %v is not ErrNotExact", err)
			}
			return
		}
		for _, s := range scopes {
			if strings.ContainsAny(s.Path+s.Host+strings.Join(s.Argv, " "), "*?") {
				t.Fatalf("pattern character in scope %+v", s)
			}
			for _, a := range s.Argv {
				if a == "..." {
					t.Fatalf("spread in scope %+v", s)
				}
			}
			s.Policy = strings.Repeat("ab", 32)
			if _, err := toks.Issue(s, time.Minute, 1); err != nil {
				t.Fatalf("scope %+v not issuable: %v", s, err)
			}
		}
	})
}
