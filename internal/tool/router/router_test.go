package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/builtin"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

func TestMain(m *testing.M) {
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	os.Exit(m.Run())
}

// extraRules is a user policy for the tests: printf and sh are allowed
// commands, curl is blocked, everything else falls to the defaults.
const extraRules = `version: 1
rules:
  - id: test.printf
    effect: allow
    match:
      action: exec
      argv:
        - [printf, ...]
        - [cat, ...]
  - id: test.no-curl
    effect: block
    message: no network tools
    match:
      action: exec
      argv:
        - [curl, ...]
`

type env struct {
	t      testing.TB
	ws     string
	home   string
	cs     *changeset.ChangeSet
	log    *audit.Log
	tdd    *tdd.Session
	broker *approval.Broker
	reg    *tool.Registry
	r      *router.Router
	// answer is what the "person" types to the next approval request.
	answer string
	asked  int
	// onAsk, when set, runs as the person is asked, before the answer.
	onAsk func()
	// requests are the approval requests the person was shown.
	requests []approval.Request
	mu       sync.Mutex
	secrets  []string
}

type notifier struct{ e *env }

func (n notifier) Notify(ctx context.Context, req approval.Request) error {
	n.e.mu.Lock()
	n.e.asked++
	n.e.requests = append(n.e.requests, req)
	ans, onAsk := n.e.answer, n.e.onAsk
	n.e.mu.Unlock()
	if onAsk != nil {
		onAsk()
	}
	go func() {
		_ = n.e.broker.Answer(context.WithoutCancel(ctx), req.ID, ans, approval.Who{Name: "ana", Channel: "test"})
	}()
	return nil
}

type setup struct {
	mode     tdd.Mode
	sandbox  bool
	approver bool
	tokens   bool       // approved plan steps become capability tokens
	audit    *audit.Log // use this log instead of a fresh one
	// hook changes the router's options last (wrapping its audit log
	// or runtime).
	hook func(*router.Options)
	// userPolicy replaces extraRules as the user's policy file.
	userPolicy []byte
	// protected are workspace paths added to fluffy's protected files.
	protected []string
	// live, when set, is the policy of both the broker and the gate, so
	// a test can change it (as the kernel's live policy does).
	live *livePolicy
}

// livePolicy is a policy that a test changes: the engine in force, and
// the options to compile another with.
type livePolicy struct {
	opts policy.Options
	cur  atomic.Pointer[policy.Engine]
}

func (l *livePolicy) Decide(ctx context.Context, op operation.Operation) policy.Decision {
	return l.cur.Load().Decide(ctx, op)
}

func (l *livePolicy) Explain(ctx context.Context, op operation.Operation) policy.Decision {
	return l.cur.Load().Explain(ctx, op)
}

func (l *livePolicy) Digest() string { return l.cur.Load().Digest() }

// set compiles userRules as the user's policy and puts it in force.
func (l *livePolicy) set(t testing.TB, userRules string) {
	t.Helper()
	e, err := policy.Compile(l.opts, policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: []byte(userRules)})
	must(t, err)
	l.cur.Store(e)
}

func newEnv(t testing.TB, s setup) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("change sets and the native sandbox need root here")
	}
	ctx := context.Background()
	base := t.TempDir()
	e := &env{t: t, ws: filepath.Join(base, "ws"), home: filepath.Join(base, "home"), answer: "/approve"}
	must(t, os.MkdirAll(filepath.Join(e.ws, "pkg"), 0o755))
	must(t, os.MkdirAll(e.home, 0o700))
	must(t, os.WriteFile(filepath.Join(e.ws, "go.mod"), []byte("module example.com/m\n\ngo 1.22\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(e.ws, "pkg", "calc.go"), []byte("package pkg\n\nfunc Add(a, b int) int { return a - b }\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(e.ws, "README.md"), []byte("hello\nworld\n"), 0o644))
	var err error
	e.cs, err = changeset.Begin(ctx, e.ws, filepath.Join(base, "cs"))
	must(t, err)
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: e.ws, FS: e.cs.Links()})
	must(t, err)
	e.ws = res.Workspace()
	reg := tool.NewRegistry()
	e.reg = reg
	must(t, builtin.Register(reg, builtin.Options{ChangeSet: e.cs, Resolver: res, Coverage: func() bool { return e.tdd.WantsCoverage() }}))

	db, err := store.OpenMain(ctx, e.home)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: db})
	must(t, err)
	m, err := tdd.New(tdd.Options{})
	must(t, err)
	if s.mode == "" {
		s.mode = tdd.Strict
	}
	e.tdd, err = tdd.Resume(ctx, j, m, "s1", s.mode)
	must(t, err)

	popts := policy.Options{Home: e.home, Protected: policy.Protected{Paths: []string{e.home}}}
	for _, p := range s.protected {
		popts.Protected.Paths = append(popts.Protected.Paths, filepath.Join(e.ws, p))
	}
	var grants *approval.Grants
	if s.tokens {
		toks, err := policy.NewTokens([]byte("a test key of at least 32 bytes!!"), time.Now)
		must(t, err)
		popts.Tokens = toks
		grants, err = approval.NewGrants(approval.GrantOptions{Issuer: toks, Uses: 1})
		must(t, err)
	}
	userRules := []byte(extraRules)
	if s.userPolicy != nil {
		userRules = s.userPolicy
	}
	eng, err := policy.Compile(popts,
		policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: userRules})
	must(t, err)

	var gate interface {
		router.PolicyGate
		approval.Decider
	} = eng
	if s.live != nil {
		s.live.opts = popts
		s.live.cur.Store(eng)
		gate = s.live
	}

	e.log = s.audit
	if e.log == nil {
		e.log, err = audit.Open(ctx, audit.Options{Path: filepath.Join(e.home, "audit.db"), KeyDir: filepath.Join(e.home, "keys")})
		must(t, err)
		t.Cleanup(func() { e.log.Close() })
	}
	o := router.Options{
		Registry: reg, Resolver: res, State: e.tdd, Policy: gate, Audit: e.log, ChangeSet: e.cs,
		Session:   operation.Session{ID: "s1", Workspace: e.ws},
		Sanitizer: tool.NewSanitizer(tool.SanitizerOptions{Secrets: func() []string { return e.secrets }}),
		Timeout:   30 * time.Second,
	}
	if s.approver {
		e.broker, err = approval.NewBroker(approval.Options{Evaluator: approval.PolicyEvaluator{Engine: gate}, Notifier: notifier{e}, Recorder: approval.AuditRecorder{Log: e.log}, Timeout: 20 * time.Second})
		must(t, err)
		o.Approver = e.broker
	}
	if grants != nil {
		o.Grants = grants
	}
	if s.sandbox {
		self, err := os.Executable()
		must(t, err)
		o.Runtime, err = native.New(native.Options{Self: self})
		must(t, err)
	}
	if s.hook != nil {
		s.hook(&o)
	}
	e.r, err = router.New(o)
	must(t, err)
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var callN int

func tc(name string, args any) llm.ToolCall {
	raw, _ := json.Marshal(args)
	callN++
	return llm.ToolCall{ID: "c" + string(rune('a'+callN%26)), Name: name, Args: raw}
}

// kinds returns the kinds of the audit entries after seq from.
func (e *env) entries(from uint64) []audit.Entry {
	e.t.Helper()
	must(e.t, e.log.Flush(context.Background()))
	var out []audit.Entry
	err := e.log.Reader().Entries(context.Background(), audit.Filter{}, func(en audit.Entry) error {
		if en.Seq > from {
			out = append(out, en)
		}
		return nil
	})
	must(e.t, err)
	return out
}

func kinds(es []audit.Entry) []string {
	var out []string
	for _, en := range es {
		out = append(out, string(en.Kind))
	}
	return out
}

func (e *env) last() uint64 {
	es := e.entries(0)
	if len(es) == 0 {
		return 0
	}
	return es[len(es)-1].Seq
}

func TestPipeline(t *testing.T) {
	e := newEnv(t, setup{approver: true, sandbox: true})
	must(t, os.Symlink("/etc", filepath.Join(e.ws, "etc-link")))
	ctx := t.Context()
	for _, c := range []struct {
		name     string
		call     llm.ToolCall
		answer   string
		isError  bool
		contains []string
		kinds    []string
	}{
		{
			name: "fast-path read allowed", call: tc("fs.read", map[string]any{"path": "README.md"}),
			contains: []string{"     1\thello", "     2\tworld"}, kinds: []string{"tool.read"},
		},
		{
			name: "unknown tool", call: tc("fs.raed", map[string]any{"path": "x"}), isError: true,
			contains: []string{"refused by the decode gate (rule unknown-tool)", "did you mean fs.read"}, kinds: []string{"tool.request", "tool.refused"},
		},
		{
			name: "bad arguments", call: tc("fs.read", map[string]any{"path": 3}), isError: true,
			contains: []string{"refused by the decode gate (rule invalid-arguments)", "path"}, kinds: []string{"tool.request", "tool.refused"},
		},
		{
			name: "read outside the workspace: refused before anyone is asked", call: tc("fs.read", map[string]any{"path": "/etc/passwd"}), isError: true,
			contains: []string{"refused by the normalize gate (rule outside-workspace)", "/etc/passwd"}, kinds: []string{"tool.request", "tool.refused"},
		},
		{
			name: "a symlink in the workspace does not lead a read out", call: tc("search.grep", map[string]any{"pattern": "root", "path": "etc-link"}), isError: true,
			contains: []string{"refused by the normalize gate (rule outside-workspace)", "resolves to /etc"}, kinds: []string{"tool.request", "tool.refused"},
		},
		{
			name: "TDD refuses a source write before a failing test", call: tc("fs.write", map[string]any{"path": "pkg/calc.go", "content": "package pkg\n"}), isError: true,
			contains: []string{"refused by the state gate (rule need_failing_test)", "write a failing test first", "instead:"}, kinds: []string{"tool.request", "gate.state"},
		},
		{
			name: "policy blocks a protected write", call: tc("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "x"}),
			contains: []string{"wrote pkg/calc_test.go", "[tdd: idle → writing_test"}, kinds: []string{"tool.request", "gate.state", "gate.policy", "exec.start", "exec.end"},
		},
		{
			name: "policy block: write outside the workspace", call: tc("fs.write", map[string]any{"path": "/etc/fluffy-test", "content": "x"}), isError: true,
			contains: []string{"refused by the policy gate (rule builtin.write-outside-workspace)", "instead: write inside the workspace"}, kinds: []string{"tool.request", "gate.state", "gate.policy"},
		},
		{
			name: "policy block: a user rule", call: tc("shell.exec", map[string]any{"command": "curl http://example.com"}), isError: true,
			contains: []string{"refused by the policy gate (rule test.no-curl)", "no network tools"}, kinds: []string{"tool.request", "gate.state", "gate.policy"},
		},
		{
			name: "approval denied", call: tc("shell.exec", map[string]any{"command": "ls -la"}), answer: "/deny too broad", isError: true,
			contains: []string{"refused by the approval gate (rule fallback)", "a person denied it: too broad"}, kinds: []string{"tool.request", "gate.state", "gate.policy", "approval.request", "approval.decision", "tool.refused"},
		},
		{
			name: "approval approved, runs in the sandbox", call: tc("shell.exec", map[string]any{"command": "echo sandboxed; id -u"}), answer: "/approve",
			contains: []string{"sandboxed\n0\n", "[exit status 0]"}, kinds: []string{"tool.request", "gate.state", "gate.policy", "approval.request", "approval.decision", "exec.start", "exec.end"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.mu.Lock()
			e.answer = c.answer
			e.mu.Unlock()
			from := e.last()
			res, err := e.r.Call(ctx, c.call)
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if res.IsError != c.isError {
				t.Errorf("IsError = %v, want %v; content:\n%s", res.IsError, c.isError, res.Content)
			}
			for _, s := range c.contains {
				if !strings.Contains(res.Content, s) {
					t.Errorf("content lacks %q:\n%s", s, res.Content)
				}
			}
			if got := kinds(e.entries(from)); !slices.Equal(got, c.kinds) {
				t.Errorf("audit kinds = %v, want %v", got, c.kinds)
			}
		})
	}
}

// The audit log is written before the result: a closed log refuses
// every call, and the call did not run.
func TestAuditFailureRefuses(t *testing.T) {
	e := newEnv(t, setup{})
	must(t, e.log.Close())
	res, err := e.r.Call(t.Context(), tc("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "package pkg\n"}))
	if !errors.Is(err, router.ErrAudit) {
		t.Fatalf("err = %v, want ErrAudit", err)
	}
	if !res.IsError || !strings.Contains(res.Content, "refused") {
		t.Errorf("result = %+v", res)
	}
	if _, err := e.cs.Stat("pkg/calc_test.go"); err == nil {
		t.Error("the write happened although it could not be audited")
	}
	res, err = e.r.Call(t.Context(), tc("fs.read", map[string]any{"path": "README.md"}))
	if !errors.Is(err, router.ErrAudit) || strings.Contains(res.Content, "hello") {
		t.Errorf("read with a broken audit log: %+v, %v", res, err)
	}
}

// eventLog, plainRuntime and gatedRuntime note, in one sequence, what reaches the
// audit log and when a sandbox starts.
type eventLog struct {
	router.Recorder
	ev       *events
	flushErr error // Flush fails with it (nothing is written)
}

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.list = append(e.list, s)
	e.mu.Unlock()
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

func (l eventLog) Append(ctx context.Context, en audit.Entry) (uint64, error) {
	l.ev.add("append " + string(en.Kind))
	return l.Recorder.Append(ctx, en)
}

func (l eventLog) Flush(ctx context.Context) error {
	l.ev.add("flush")
	if l.flushErr != nil {
		l.ev.add("flush failed")
		return l.flushErr
	}
	err := l.Recorder.Flush(ctx)
	l.ev.add("flushed")
	return err
}

// plainRuntime runs a command at once; gatedRuntime builds first and
// runs it once the gate passes (sandbox.GatedRunner).
type plainRuntime struct {
	sandbox.Runtime
	ev *events
}

func (r plainRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	r.ev.add("command starts")
	return r.Runtime.Run(ctx, spec)
}

type gatedRuntime struct {
	plainRuntime
	gr sandbox.GatedRunner
}

func (r gatedRuntime) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	r.ev.add("build")
	return r.gr.RunGated(ctx, spec, func() error {
		err := gate()
		if err == nil {
			r.ev.add("command starts")
		}
		return err
	})
}

// A sandboxed command runs only once its exec.start (and the gates'
// records before it) is durable, as with `fluffy sandbox run`, with the
// commit beside the sandbox's build where the runtime can build first;
// when the commit fails the command does not run, and the log says so
// right after the exec.start.
func TestSandboxExecWriteAhead(t *testing.T) {
	for _, gated := range []bool{true, false} {
		for _, fail := range []bool{false, true} {
			name := map[bool]string{true: "gated", false: "plain"}[gated] + "/" + map[bool]string{false: "durable", true: "flush fails"}[fail]
			t.Run(name, func(t *testing.T) {
				ev := &events{}
				var flushErr error
				if fail {
					flushErr = errors.New("disk full")
				}
				e := newEnv(t, setup{sandbox: true, hook: func(o *router.Options) {
					o.Audit = eventLog{Recorder: o.Audit, ev: ev, flushErr: flushErr}
					p := plainRuntime{Runtime: o.Runtime, ev: ev}
					o.Runtime = p
					if gated {
						o.Runtime = gatedRuntime{plainRuntime: p, gr: p.Runtime.(sandbox.GatedRunner)}
					}
				}})
				from := e.last()
				res, err := e.r.Call(t.Context(), tc("shell.exec", map[string]any{"command": "cat README.md"}))
				got := ev.get()
				at := func(what string, after int) int {
					if after < 0 {
						return -1
					}
					if i := slices.Index(got[after:], what); i >= 0 {
						return after + i
					}
					return -1
				}
				start := at("append exec.start", 0)
				if start < 0 {
					t.Fatalf("no exec.start: %v", got)
				}
				if gated != slices.Contains(got, "build") {
					t.Errorf("events %v: gated %v", got, gated)
				}
				if !fail {
					must(t, err)
					if !strings.Contains(res.Content, "hello") {
						t.Errorf("result %q", res.Content)
					}
					flushed := at("flushed", at("flush", start))
					run := at("command starts", flushed)
					if flushed < 0 || run < 0 || at("append exec.end", run) < 0 || slices.Index(got, "command starts") != run {
						t.Errorf("events %v: want exec.start appended, then flushed, then the command, then exec.end", got)
					}
					return
				}
				if !errors.Is(err, router.ErrAudit) || !res.IsError {
					t.Fatalf("flush failing: %+v, %v; want a refusal with ErrAudit", res, err)
				}
				if slices.Contains(got, "command starts") || at("append exec.end", at("flush failed", start)) != len(got)-1 {
					t.Errorf("events %v: want no command, and exec.end appended last", got)
				}
				// Both are queued in the real log, in order: the end says
				// the command did not run.
				es := e.entries(from)
				if k := kinds(es); len(k) < 2 || k[len(k)-2] != "exec.start" || k[len(k)-1] != "exec.end" {
					t.Fatalf("kinds %v", k)
				}
				p, _ := json.Marshal(es[len(es)-1].Payload)
				if !strings.Contains(string(p), "not run") {
					t.Errorf("exec.end %s does not say the command did not run", p)
				}
			})
		}
	}
}

// A kernel tool writes only into the change set: its exec.start stays
// buffered (no commit before it runs); exec.end and the commit follow.
func TestKernelExecNotWrittenAhead(t *testing.T) {
	ev := &events{}
	e := newEnv(t, setup{hook: func(o *router.Options) { o.Audit = eventLog{Recorder: o.Audit, ev: ev} }})
	_, err := e.r.Call(t.Context(), tc("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "package pkg\n"}))
	must(t, err)
	got := ev.get()
	i := slices.Index(got, "append exec.start")
	if i < 0 || len(got) < i+3 || got[i+1] != "append exec.end" || got[i+2] != "flush" {
		t.Errorf("events %v: want exec.start, exec.end, then the commit", got)
	}
	if _, err := e.cs.Stat("pkg/calc_test.go"); err != nil {
		t.Errorf("the write did not land in the change set: %v", err)
	}
}

func TestSanitizing(t *testing.T) {
	e := newEnv(t, setup{sandbox: true})
	// The secret comes from the command's output (a file the model has
	// not seen), as a credential injected into a sandbox would.
	e.secrets = []string{"hunter2-SECRET"}
	must(t, os.WriteFile(filepath.Join(e.ws, "out.txt"), []byte("\x1b[31mred\x1b[0m \x1b]0;title\x07ok hunter2-SECRET\n"), 0o644))
	res, err := e.r.Call(t.Context(), tc("shell.exec", map[string]any{"command": "cat out.txt"}))
	must(t, err)
	if strings.ContainsAny(res.Content, "\x1b\x07") {
		t.Errorf("control sequences survived: %q", res.Content)
	}
	if strings.Contains(res.Content, "hunter2") || !strings.Contains(res.Content, "[REDACTED]") {
		t.Errorf("secret not redacted: %q", res.Content)
	}
	if !strings.Contains(res.Content, `\x1b[31mred\x1b[0m \x1b]0;title\aok`) {
		t.Errorf("text lost or not shown escaped: %q", res.Content)
	}
	// The secret is not in the audit log either (only the sanitized
	// output's hash is).
	for _, en := range e.entries(0) {
		b, _ := json.Marshal(en.Payload)
		if strings.Contains(string(b), "hunter2") {
			t.Errorf("secret in audit entry %s: %s", en.Kind, b)
		}
	}
}

// Reads see the change set; writes reach the real tree only through
// apply.
func TestWritesGoToTheChangeSet(t *testing.T) {
	e := newEnv(t, setup{mode: tdd.Explore})
	ctx := t.Context()
	res, err := e.r.Call(ctx, tc("fs.edit", map[string]any{"path": "pkg/calc.go", "old": "a - b", "new": "a + b"}))
	must(t, err)
	if res.IsError {
		t.Fatalf("edit: %s", res.Content)
	}
	real, _ := os.ReadFile(filepath.Join(e.ws, "pkg/calc.go"))
	if strings.Contains(string(real), "a + b") {
		t.Fatal("the edit reached the real tree")
	}
	res, err = e.r.Call(ctx, tc("fs.read", map[string]any{"path": "pkg/calc.go", "start_line": 3}))
	must(t, err)
	if !strings.Contains(res.Content, "return a + b") || strings.Contains(res.Content, "package") {
		t.Errorf("read through the change set: %q", res.Content)
	}
	res, err = e.r.Call(ctx, tc("fs.edit", map[string]any{"path": "pkg/calc.go", "old": "return a * b", "new": "x"}))
	must(t, err)
	if !res.IsError || !strings.Contains(res.Content, "nearest match is at lines 3-3") {
		t.Errorf("edit without a match: %s", res.Content)
	}
	res, err = e.r.Call(ctx, tc("search.grep", map[string]any{"pattern": `a \+ b`}))
	must(t, err)
	if !strings.Contains(res.Content, "pkg/calc.go:3:") {
		t.Errorf("grep: %s", res.Content)
	}
	res, err = e.r.Call(ctx, tc("fs.write", map[string]any{"path": "cmd/tool/main.go", "content": "package main\n"}))
	must(t, err)
	res, err = e.r.Call(ctx, tc("search.glob", map[string]any{"pattern": "**/*.go"}))
	must(t, err)
	if res.Content != "cmd/tool/main.go\npkg/calc.go\n" {
		t.Errorf("glob: %q", res.Content)
	}
	if err := e.r.Exclusive(func() error { _, err := e.cs.Apply(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	real, _ = os.ReadFile(filepath.Join(e.ws, "pkg/calc.go"))
	if !strings.Contains(string(real), "a + b") {
		t.Error("apply did not bring the edit to the real tree")
	}
}

// Read-only calls of one turn run in parallel; writes wait for them and
// run in order.
func TestCallAllOrdering(t *testing.T) {
	e := newEnv(t, setup{mode: tdd.Explore})
	calls := []llm.ToolCall{
		tc("fs.read", map[string]any{"path": "README.md"}),
		tc("fs.list", map[string]any{"path": "."}),
		tc("fs.exists", map[string]any{"path": "go.mod"}),
		tc("fs.write", map[string]any{"path": "notes.txt", "content": "one"}),
		tc("fs.read", map[string]any{"path": "notes.txt"}),
		tc("fs.edit", map[string]any{"path": "notes.txt", "old": "one", "new": "two"}),
		tc("fs.read", map[string]any{"path": "notes.txt"}),
	}
	res, errs := e.r.CallAll(t.Context(), calls)
	for i, err := range errs {
		must(t, err)
		if res[i].IsError {
			t.Errorf("call %d (%s): %s", i, calls[i].Name, res[i].Content)
		}
	}
	if !strings.Contains(res[4].Content, "one") || !strings.Contains(res[6].Content, "two") {
		t.Errorf("reads after writes saw %q and %q", res[4].Content, res[6].Content)
	}
	if !strings.Contains(res[1].Content, "README.md") || !strings.Contains(res[2].Content, "yes") {
		t.Errorf("parallel reads: %q %q", res[1].Content, res[2].Content)
	}
	// The audit log has the write's entries after every read before it
	// and before every read after it.
	var seq []string
	for _, en := range e.entries(0) {
		switch en.Kind {
		case audit.KindToolRead:
			seq = append(seq, "r")
		case audit.KindExecEnd:
			seq = append(seq, "w")
		}
	}
	if got := strings.Join(seq, ""); got != "rrrwrwr" {
		t.Errorf("audit order = %s, want rrrwrwr", got)
	}
}

// Parallel read-only calls really overlap: many concurrent reads from
// several goroutines complete, with -race, and the router holds no
// exclusive lock for them.
func TestParallelReads(t *testing.T) {
	e := newEnv(t, setup{})
	var calls []llm.ToolCall
	for range 16 {
		calls = append(calls, tc("fs.read", map[string]any{"path": "README.md"}))
	}
	res, errs := e.r.CallAll(t.Context(), calls)
	for i := range calls {
		if errs[i] != nil || !strings.Contains(res[i].Content, "hello") {
			t.Errorf("call %d: %+v %v", i, res[i], errs[i])
		}
	}
}

// A plan approved once through request_approval covers its steps: each
// runs once without asking again.
func TestRequestApproval(t *testing.T) {
	e := newEnv(t, setup{approver: true, sandbox: true})
	ctx := t.Context()
	res, err := e.r.Call(ctx, tc("request_approval", map[string]any{
		"summary": "list files",
		"steps":   []any{map[string]any{"tool": "shell.exec", "args": map[string]any{"command": "ls"}, "note": "see the files"}},
	}))
	must(t, err)
	if res.IsError || !strings.Contains(res.Content, "step 1 (shell.exec): approved") {
		t.Fatalf("plan: %s", res.Content)
	}
	asked := e.asked
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls"}))
	must(t, err)
	if res.IsError || !strings.Contains(res.Content, "go.mod") {
		t.Errorf("approved step: %s", res.Content)
	}
	if e.asked != asked {
		t.Error("the person was asked again for an approved step")
	}
	if !strings.Contains(res.Decision, "approved in an earlier plan") {
		t.Errorf("decision = %q", res.Decision)
	}
	// Once only: the next identical call asks again.
	e.answer = "/deny enough"
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls"}))
	must(t, err)
	if !res.IsError || e.asked != asked+1 {
		t.Errorf("second call: asked %d, %s", e.asked-asked, res.Content)
	}
}

// With Grants, an approved plan step becomes a capability token scoped to
// the exact operation: the policy engine allows that operation once
// without asking; the same call again, or another argv, is asked.
func TestRequestApprovalTokens(t *testing.T) {
	e := newEnv(t, setup{approver: true, sandbox: true, tokens: true})
	ctx := t.Context()
	res, err := e.r.Call(ctx, tc("request_approval", map[string]any{
		"summary": "list files",
		"steps":   []any{map[string]any{"tool": "shell.exec", "args": map[string]any{"command": "ls"}, "note": "see the files"}},
	}))
	must(t, err)
	if res.IsError || !strings.Contains(res.Content, "step 1 (shell.exec): approved") {
		t.Fatalf("plan: %s", res.Content)
	}
	asked := e.asked
	e.answer = "/deny not approved"
	// Another argv is not covered by the token.
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls -la"}))
	must(t, err)
	if !res.IsError || e.asked != asked+1 {
		t.Fatalf("other argv: asked %d times, %s", e.asked-asked, res.Content)
	}
	// The approved operation runs on its token, without asking.
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls"}))
	must(t, err)
	if res.IsError || !strings.Contains(res.Content, "go.mod") || e.asked != asked+1 {
		t.Fatalf("approved step: asked %d times, %s", e.asked-asked, res.Content)
	}
	if strings.Contains(res.Decision, "approved in an earlier plan") {
		t.Errorf("the step ran on the signature fallback, not on its token: %q", res.Decision)
	}
	// The token was single-use: the same call is asked again.
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls"}))
	must(t, err)
	if !res.IsError || e.asked != asked+2 {
		t.Errorf("second call: asked %d times, %s", e.asked-asked, res.Content)
	}
}

// TestPlanStepIsBoundToThePolicyItWasShownUnder: a step approved in a
// plan runs without asking only under the policy its request showed it
// under. When the policy changes while the person is asked, or between
// the plan and the call, the gate decides under the new policy and asks
// again, with tokens and with the one-time approval by signature alike.
func TestPlanStepIsBoundToThePolicyItWasShownUnder(t *testing.T) {
	for _, c := range []struct {
		name   string
		tokens bool
		during bool // the change comes while the person is asked
	}{
		{"signature, change after", false, false},
		{"signature, change during", false, true},
		{"tokens, change after", true, false},
		{"tokens, change during", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			live := &livePolicy{}
			e := newEnv(t, setup{approver: true, sandbox: true, tokens: c.tokens, live: live})
			ctx := t.Context()
			// ls still needs approval under the new policy; only an
			// unrelated rule is added.
			change := func() {
				live.set(t, extraRules+"  - id: test.unrelated\n    effect: block\n    match:\n      argv: [[telnet, ...]]\n")
			}
			if c.during {
				e.onAsk = change
			}
			res, err := e.r.Call(ctx, tc("request_approval", map[string]any{
				"summary": "list files",
				"steps":   []any{map[string]any{"tool": "shell.exec", "args": map[string]any{"command": "ls"}}},
			}))
			must(t, err)
			if res.IsError || !strings.Contains(res.Content, "step 1 (shell.exec): approved") {
				t.Fatalf("plan: %s", res.Content)
			}
			e.onAsk = nil
			if !c.during {
				change()
			}
			asked := e.asked
			e.answer = "/deny asked again"
			res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "ls"}))
			must(t, err)
			if e.asked != asked+1 || !res.IsError {
				t.Errorf("the step approved under the old policy ran under the new one without asking (asked %d times): %s", e.asked-asked, res.Decision)
			}
		})
	}
}

// test.run runs the real go command in the sandbox; its parsed result
// moves the TDD machine: a failing new test is red, then the fix is
// allowed and the run turns green.
//
// Building the standard library's test dependencies from an empty cache
// in the sandbox takes minutes on a loaded machine, so this runs only
// with FLUFFY_SLOW_TESTS=1; TestTestRunPytest covers the same path fast.
func TestTestRunGo(t *testing.T) {
	if os.Getenv("FLUFFY_SLOW_TESTS") == "" {
		t.Skip("set FLUFFY_SLOW_TESTS=1 (builds std test deps in a sandbox, minutes)")
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Skip("no Go toolchain at /usr/local/go")
	}
	e := newEnv(t, setup{sandbox: true})
	ctx := t.Context()
	call := func(name string, args any) string {
		t.Helper()
		res, err := e.r.Call(ctx, tc(name, args))
		must(t, err)
		return res.Content
	}
	out := call("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "package pkg\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 2) != 4 {\n\t\tt.Fatal(\"2+2\")\n\t}\n}\n"})
	if !strings.Contains(out, "writing_test") {
		t.Fatalf("test write: %s", out)
	}
	out = call("test.run", map[string]any{"args": []string{"./pkg/"}, "timeout_seconds": 600})
	if !strings.Contains(out, "1 failed") || !strings.Contains(out, "→ red") {
		t.Fatalf("first run: %s", out)
	}
	out = call("fs.edit", map[string]any{"path": "pkg/calc.go", "old": "a - b", "new": "a + b"})
	if !strings.Contains(out, "edited") {
		t.Fatalf("fix: %s", out)
	}
	out = call("test.run", map[string]any{"args": []string{"./pkg/"}, "timeout_seconds": 600})
	if !strings.Contains(out, "1 passed") || !strings.Contains(out, "→ green") {
		t.Fatalf("second run: %s", out)
	}
	if st := e.tdd.Status().State; st != tdd.Green {
		t.Errorf("state = %s", st)
	}
}

// test.run with pytest (Debian's python3-pytest, see scripts/deps.sh):
// red, then the fix, then green; the TDD machine follows.
func TestTestRunPytest(t *testing.T) {
	if _, err := os.Stat("/usr/bin/pytest"); err != nil {
		t.Skip("no /usr/bin/pytest (apt-get install python3-pytest)")
	}
	e := newEnv(t, setup{sandbox: true})
	must(t, os.WriteFile(filepath.Join(e.ws, "calc.py"), []byte("def add(a, b):\n    return a - b\n"), 0o644))
	ctx := t.Context()
	call := func(name string, args any) string {
		t.Helper()
		res, err := e.r.Call(ctx, tc(name, args))
		must(t, err)
		return res.Content
	}
	if out := call("fs.edit", map[string]any{"path": "calc.py", "old": "a - b", "new": "a + b"}); !strings.Contains(out, "refused by the state gate") {
		t.Fatalf("source edit before a failing test: %s", out)
	}
	if out := call("fs.write", map[string]any{"path": "test_calc.py", "content": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"}); !strings.Contains(out, "writing_test") {
		t.Fatalf("test write: %s", out)
	}
	out := call("test.run", map[string]any{"runner": "pytest"})
	if !strings.Contains(out, "1 failed") || !strings.Contains(out, "→ red") || !strings.Contains(out, "FAIL") {
		t.Fatalf("first run: %s", out)
	}
	if out := call("fs.edit", map[string]any{"path": "calc.py", "old": "a - b", "new": "a + b"}); !strings.Contains(out, "edited") {
		t.Fatalf("fix: %s", out)
	}
	out = call("test.run", map[string]any{"runner": "pytest"})
	if !strings.Contains(out, "1 passed") || !strings.Contains(out, "→ green") {
		t.Fatalf("second run: %s", out)
	}
	if st := e.tdd.Status().State; st != tdd.Green {
		t.Errorf("state = %s", st)
	}
}

// In explore mode test.run measures coverage: with pytest only where
// pytest-cov is installed, and the result says plainly when it is not;
// with it, the run shows each indebted file's coverage.
func TestTestRunPytestCoverage(t *testing.T) {
	if _, err := os.Stat("/usr/bin/pytest"); err != nil {
		t.Skip("no /usr/bin/pytest (apt-get install python3-pytest)")
	}
	e := newEnv(t, setup{sandbox: true, mode: tdd.Explore})
	ctx := t.Context()
	call := func(name string, args any) string {
		t.Helper()
		res, err := e.r.Call(ctx, tc(name, args))
		must(t, err)
		return res.Content
	}
	if out := call("fs.write", map[string]any{"path": "calc.py", "content": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"}); !strings.Contains(out, "implementing") {
		t.Fatalf("explore write: %s", out)
	}
	call("fs.write", map[string]any{"path": "test_calc.py", "content": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"})
	out := call("test.run", map[string]any{"runner": "pytest"})
	if !strings.Contains(out, "1 passed") {
		t.Fatalf("run: %s", out)
	}
	if exec.Command("sh", "-c", "pytest --help | grep -q -- --cov=").Run() != nil {
		if !strings.Contains(out, "coverage: not measured (pytest-cov is not installed in the sandbox)") {
			t.Fatalf("without pytest-cov: %s", out)
		}
		if e.tdd.Status().Coverage != nil {
			t.Fatal("coverage recorded without a report")
		}
		return
	}
	if !strings.Contains(out, "tech debt coverage: calc.py") {
		t.Fatalf("with pytest-cov: %s", out)
	}
}

// What a sandboxed command writes is a write for the TDD machine too: a
// source file written by a command before any failing test is refused
// (reported, not stored), a test file moves the machine.
func TestCommandWritesFeedTDD(t *testing.T) {
	e := newEnv(t, setup{sandbox: true, approver: true})
	ctx := t.Context()
	res, err := e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "echo 'package pkg' > pkg/extra.go"}))
	must(t, err)
	if !strings.Contains(res.Content, "the command wrote pkg/extra.go, which the TDD machine refuses (need_failing_test)") {
		t.Errorf("source written by a command: %s", res.Content)
	}
	if st := e.tdd.Status().State; st != tdd.Idle {
		t.Errorf("state = %s, want idle", st)
	}
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "echo 'package pkg' > pkg/extra_test.go"}))
	must(t, err)
	if !strings.Contains(res.Content, "the command wrote pkg/extra_test.go: idle → writing_test") {
		t.Errorf("test written by a command: %s", res.Content)
	}
}

// The router tells the policy which files the agent wrote (the change
// set), so that a rule can tell `make test` of the repository's Makefile
// from `make test` of one the agent wrote.
func TestAgentWrittenFromTheChangeSet(t *testing.T) {
	e := newEnv(t, setup{mode: tdd.Explore, approver: true, userPolicy: []byte(`
rules:
  - id: test.agent-scripts
    effect: block
    message: this runs a file the agent wrote
    match: {action: exec, written_by_agent: true}
  - id: test.make-ask
    effect: approve
    match: {action: exec, argv: [make, test]}
`)})
	e.answer = "/deny not now"
	ctx := t.Context()
	res, err := e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "make test"}))
	must(t, err)
	if !strings.Contains(res.Content, "refused by the approval gate (rule test.make-ask)") {
		t.Fatalf("make test of an untouched tree: %s", res.Content)
	}
	res, err = e.r.Call(ctx, tc("fs.write", map[string]any{"path": "Makefile", "content": "test:\n\tcurl https://x\n"}))
	must(t, err)
	if res.IsError {
		t.Fatalf("write: %s", res.Content)
	}
	res, err = e.r.Call(ctx, tc("shell.exec", map[string]any{"command": "make test"}))
	must(t, err)
	if !strings.Contains(res.Content, "refused by the policy gate (rule test.agent-scripts)") {
		t.Fatalf("make test after the agent wrote the Makefile: %s", res.Content)
	}
}
