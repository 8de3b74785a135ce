package wiring

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// entries is an audit appender that keeps what it is given; fail makes
// Append fail, and before runs before an entry is taken.
type entries struct {
	mu     sync.Mutex
	list   []audit.Entry
	fail   error
	before func(audit.Entry)
}

func (e *entries) Append(_ context.Context, en audit.Entry) (uint64, error) {
	if e.before != nil {
		e.before(en)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return 0, e.fail
	}
	e.list = append(e.list, en)
	return uint64(len(e.list)), nil
}

func (e *entries) changes() []audit.PolicyChange {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []audit.PolicyChange
	for _, en := range e.list {
		if c, ok := en.Payload.(audit.PolicyChange); ok {
			out = append(out, c)
		}
	}
	return out
}

// liveFixture is a workspace and a user policy file under a temporary
// home, and a live policy over them.
type liveFixture struct {
	ws, userPolicy string
	live           *livePolicy
	rec            *entries
	log            *bytes.Buffer
}

// newLiveFixture builds the fixture; with watch, the live policy has an
// inotify watcher (else it compares stamps).
func newLiveFixture(t testing.TB, watch bool) *liveFixture {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, ".fluffy"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := &userenv.Env{Stderr: io.Discard, Cwd: ws, Self: filepath.Join(dir, "bin", "fluffy-core"),
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}}
	f := &liveFixture{ws: ws, userPolicy: u.PolicyFiles().User, rec: &entries{}, log: &bytes.Buffer{}}
	if err := os.MkdirAll(filepath.Dir(f.userPolicy), 0o755); err != nil {
		t.Fatal(err)
	}
	f.live = &livePolicy{u: u, log: slog.New(slog.NewTextHandler(f.log, nil)), audit: f.rec}
	if watch {
		w, err := newWatcher()
		if err != nil {
			t.Skipf("no inotify: %v", err)
		}
		f.live.watch = w
		t.Cleanup(func() { w.Close() })
	}
	return f
}

func (f *liveFixture) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(f.userPolicy, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *liveFixture) decide(t *testing.T) policy.Decision {
	t.Helper()
	op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"},
		Commands: []operation.Command{{Argv: []string{"make", "install"}}},
		Session:  operation.Session{ID: "s1", Workspace: f.ws}}
	return (&sessionPolicy{live: f.live, ws: f.ws}).Decide(t.Context(), op)
}

const (
	allowMake = "rules:\n  - id: make-ok\n    effect: allow\n    match:\n      argv: [make, install]\n"
	blockMake = "rules:\n  - id: no-make-install\n    effect: block\n    message: not here\n    match:\n      argv: [make, install]\n"
	// brokenMake has an unknown effect on line 3.
	brokenMake = "rules:\n  - id: no-make-install\n    effect: blok\n    match:\n      argv: [make, install]\n"
)

// TestLivePolicyEditDecidesTheNextCall: an edit of the user's policy
// decides the next call, and is recorded as policy.change (files, digests,
// rule ids) before the new rules decide anything.
func TestLivePolicyEditDecidesTheNextCall(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		f.write(t, allowMake)
		if d := f.decide(t); d.Effect != policy.Allow || d.Rule != "make-ok" {
			t.Fatalf("before the edit: %v by %s; want allow by make-ok", d.Effect, d.Rule)
		}
		old, err := f.live.engine(t.Context(), f.ws)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.rec.changes()) != 0 {
			t.Errorf("the first load was recorded as a change: %+v", f.rec.changes())
		}
		// When policy.change is written, the old rules are still in force.
		var inForce string
		f.rec.before = func(audit.Entry) { inForce = f.live.ws[f.ws].cur.Load().engine.Digest() }
		f.write(t, blockMake)
		if d := f.decide(t); d.Effect != policy.Block || d.Rule != "no-make-install" {
			t.Fatalf("after the edit: %v by %s; want block by no-make-install", d.Effect, d.Rule)
		}
		ch := f.rec.changes()
		if len(ch) != 1 {
			t.Fatalf("policy.change entries: %+v; want one", ch)
		}
		c := ch[0]
		if inForce != old.Digest() || c.OldPolicy != old.Digest() || c.NewPolicy == old.Digest() {
			t.Errorf("policy.change %+v written while %s was in force; want it written under the old policy %s", c, inForce, old.Digest())
		}
		if len(c.Files) != 1 || c.Files[0].File != f.userPolicy || c.Files[0].OldSHA256 == c.Files[0].NewSHA256 {
			t.Errorf("policy.change files %+v; want the user's policy with two hashes", c.Files)
		}
		if !slices.Equal(c.Added, []string{"no-make-install"}) || !slices.Equal(c.Removed, []string{"make-ok"}) {
			t.Errorf("policy.change added %v removed %v; want [no-make-install] and [make-ok]", c.Added, c.Removed)
		}
		// Unchanged files: the same engine, nothing recorded again.
		e1, _ := f.live.engine(t.Context(), f.ws)
		e2, _ := f.live.engine(t.Context(), f.ws)
		if e1 != e2 || len(f.rec.changes()) != 1 {
			t.Errorf("unchanged policy: engines %p %p, %d changes; want one engine and one change", e1, e2, len(f.rec.changes()))
		}
	})
}

// TestLivePolicyBrokenEditKeepsTheOldRules: an edit that does not compile
// keeps the rules in force, is logged once with the file and line, and is
// not recorded as a change; the next valid edit applies.
func TestLivePolicyBrokenEditKeepsTheOldRules(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		f.write(t, blockMake)
		if d := f.decide(t); d.Effect != policy.Block {
			t.Fatalf("before the edit: %v by %s; want block", d.Effect, d.Rule)
		}
		f.write(t, brokenMake)
		for range 3 {
			if d := f.decide(t); d.Effect != policy.Block || d.Rule != "no-make-install" {
				t.Fatalf("after a broken edit: %v by %s (%s); want the old block by no-make-install", d.Effect, d.Rule, d.Reason)
			}
		}
		logged := f.log.String()
		if !strings.Contains(logged, f.userPolicy+":3:") {
			t.Errorf("log %q does not name %s:3", logged, f.userPolicy)
		}
		if n := strings.Count(logged, "policy change rejected"); n != 1 {
			t.Errorf("the broken edit was logged %d times; want once:\n%s", n, logged)
		}
		if len(f.rec.changes()) != 0 {
			t.Errorf("a rejected edit was recorded: %+v", f.rec.changes())
		}
		f.write(t, allowMake)
		if d := f.decide(t); d.Effect != policy.Allow {
			t.Errorf("after the fix: %v by %s; want allow", d.Effect, d.Rule)
		}
		if len(f.rec.changes()) != 1 {
			t.Errorf("policy.change entries after the fix: %+v; want one", f.rec.changes())
		}
	})
}

// TestLivePolicyBrokenEditTellsEachSessionOnce: a session's gate tells its
// person of an edit that did not load (file, line, and that the old rules
// decide), once per session and broken edit, at its next call; a session
// that could not be told is told at its next call; a valid edit ends it.
func TestLivePolicyBrokenEditTellsEachSessionOnce(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		type told struct {
			texts []string
			deaf  int // calls to refuse (the session is not running)
		}
		gate := func(to *told) *sessionPolicy {
			return &sessionPolicy{live: f.live, ws: f.ws, warn: func(text string) bool {
				if to.deaf > 0 {
					to.deaf--
					return false
				}
				to.texts = append(to.texts, text)
				return true
			}}
		}
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"},
			Commands: []operation.Command{{Argv: []string{"make", "install"}}}, Session: operation.Session{Workspace: f.ws}}
		var a, b told
		b.deaf = 1
		ga, gb := gate(&a), gate(&b)
		decide := func(g *sessionPolicy) {
			t.Helper()
			if d := g.Decide(t.Context(), op); d.Effect != policy.Block {
				t.Fatalf("%v by %s; want the old block", d.Effect, d.Rule)
			}
		}
		f.write(t, blockMake)
		decide(ga)
		decide(gb)
		if len(a.texts)+len(b.texts) != 0 {
			t.Fatalf("told of a policy that loads: %q %q", a.texts, b.texts)
		}
		f.write(t, brokenMake)
		for range 3 {
			decide(ga)
			decide(gb)
		}
		if len(a.texts) != 1 || len(b.texts) != 1 {
			t.Fatalf("one broken edit told %d and %d times; want once each: %q %q", len(a.texts), len(b.texts), a.texts, b.texts)
		}
		if !strings.Contains(a.texts[0], f.userPolicy+":3:") || !strings.Contains(a.texts[0], "previous rules stay in force") {
			t.Errorf("warning %q does not name %s:3 and the rules in force", a.texts[0], f.userPolicy)
		}
		f.write(t, brokenMake+"# still broken\n")
		decide(ga)
		decide(ga)
		if len(a.texts) != 2 {
			t.Errorf("a second broken edit told %d times in all; want 2: %q", len(a.texts), a.texts)
		}
		f.write(t, blockMake)
		decide(ga)
		var c told
		decide(gate(&c))
		if len(a.texts) != 2 || len(c.texts) != 0 {
			t.Errorf("told after the edit was undone: %q %q", a.texts, c.texts)
		}
		f.write(t, brokenMake)
		decide(ga)
		if len(a.texts) != 3 {
			t.Errorf("the first broken edit made again was not told: %q", a.texts)
		}
	})
}

// TestLivePolicyUnrecordedChangeFailsClosed: a change the audit log cannot
// record is not applied and the gate refuses; once the log writes again,
// the change is recorded and applies.
func TestLivePolicyUnrecordedChangeFailsClosed(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		f.write(t, blockMake)
		if d := f.decide(t); d.Effect != policy.Block {
			t.Fatalf("before the edit: %v; want block", d.Effect)
		}
		f.rec.fail = errors.New("disk full")
		f.write(t, allowMake)
		if _, err := f.live.engine(t.Context(), f.ws); !errors.Is(err, ErrPolicyChangeUnrecorded) {
			t.Errorf("engine with an unwritable log: %v; want ErrPolicyChangeUnrecorded", err)
		}
		if d := f.decide(t); d.Effect != policy.Block || d.Rule != "policy-error" {
			t.Errorf("gate with an unwritable log: %v by %s; want block by policy-error", d.Effect, d.Rule)
		}
		f.rec.fail = nil
		if d := f.decide(t); d.Effect != policy.Allow || len(f.rec.changes()) != 1 {
			t.Errorf("once the log writes: %v, %d changes; want allow and one change", d.Effect, len(f.rec.changes()))
		}
	})
}

// TestLivePolicyBrokerAndGateShareOneEngine: the broker's pre-evaluation
// and a session's gate decide with the same engine, hence the same
// digest, which is what approvals and tokens are bound to.
func TestLivePolicyBrokerAndGateShareOneEngine(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		f.write(t, blockMake)
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"},
			Commands: []operation.Command{{Argv: []string{"make", "install"}}},
			Session:  operation.Session{ID: "s1", Workspace: f.ws}}
		b := f.live.Explain(t.Context(), op)
		g := &sessionPolicy{live: f.live, ws: f.ws}
		if d := g.Decide(t.Context(), op); d.Policy != b.Policy || d.Policy == "" || g.Digest() != b.Policy {
			t.Errorf("broker decided under %q, the gate under %q (digest %q); want one policy", b.Policy, d.Policy, g.Digest())
		}
	})
}

// BenchmarkPolicyGate is the live policy's cost on a session's gate: one
// decision of a fast-path read by the engine itself, through the live
// policy (its watcher's check, then the same engine), and through a live
// policy without a watcher (stat of the files). The difference is what
// the live policy adds to every tool call.
func BenchmarkPolicyGate(b *testing.B) {
	f := newLiveFixture(b, true)
	if err := os.WriteFile(f.userPolicy, []byte(allowMake), 0o644); err != nil {
		b.Fatal(err)
	}
	// Old enough that the stamps are trusted (see racyWindow).
	old := time.Now().Add(-time.Minute)
	for _, p := range []string{f.userPolicy, filepath.Dir(f.userPolicy), filepath.Join(f.ws, ".fluffy")} {
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	op := operation.Operation{Tool: "fs.read", Action: operation.Read, Paths: []operation.Path{{Abs: filepath.Join(f.ws, "README.md"), InWorkspace: true}},
		Session: operation.Session{ID: "s1", Workspace: f.ws}}
	e, err := f.live.engine(ctx, f.ws)
	if err != nil {
		b.Fatal(err)
	}
	// The same files through a live policy without a watcher.
	stamped := &livePolicy{u: f.live.u, log: f.live.log, audit: f.rec}
	if _, err := stamped.engine(ctx, f.ws); err != nil {
		b.Fatal(err)
	}
	for _, g := range []struct {
		name string
		gate interface {
			Decide(context.Context, operation.Operation) policy.Decision
		}
	}{{"engine", e}, {"live", &sessionPolicy{live: f.live, ws: f.ws}}, {"live-stamps", &sessionPolicy{live: stamped, ws: f.ws}}} {
		b.Run(g.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				d := g.gate.Decide(ctx, op)
				lat = append(lat, time.Since(t0))
				if d.Effect != policy.Allow {
					b.Fatalf("%v by %s: %s", d.Effect, d.Rule, d.Reason)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[(len(lat)*99+99)/100-1].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// bothModes runs test with a watcher and with stamps.
func bothModes(t *testing.T, test func(*testing.T, *liveFixture)) {
	for _, watch := range []bool{true, false} {
		name := "stamps"
		if watch {
			name = "inotify"
		}
		t.Run(name, func(t *testing.T) { test(t, newLiveFixture(t, watch)) })
	}
}

// TestLivePolicySeesEveryKindOfEdit: an edit through a symbolic link's
// target (a policy kept with other dotfiles), and a policy whose
// directory did not exist when the workspace's policy was first loaded,
// each decide the next call.
func TestLivePolicySeesEveryKindOfEdit(t *testing.T) {
	bothModes(t, func(t *testing.T, f *liveFixture) {
		// No user policy directory yet.
		if err := os.RemoveAll(filepath.Dir(f.userPolicy)); err != nil {
			t.Fatal(err)
		}
		if d := f.decide(t); d.Effect != policy.Approve {
			t.Fatalf("without a user policy: %v by %s; want approve", d.Effect, d.Rule)
		}
		if err := os.MkdirAll(filepath.Dir(f.userPolicy), 0o755); err != nil {
			t.Fatal(err)
		}
		f.write(t, blockMake)
		if d := f.decide(t); d.Effect != policy.Block {
			t.Fatalf("after creating the directory and the policy: %v by %s; want block", d.Effect, d.Rule)
		}
		// The policy becomes a link to a file elsewhere; then that file
		// is edited.
		target := filepath.Join(t.TempDir(), "dotfiles-policy.yaml")
		if err := os.WriteFile(target, []byte(blockMake), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(f.userPolicy); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, f.userPolicy); err != nil {
			t.Fatal(err)
		}
		if d := f.decide(t); d.Effect != policy.Block {
			t.Fatalf("through the link: %v by %s; want block", d.Effect, d.Rule)
		}
		if err := os.WriteFile(target, []byte(allowMake), 0o644); err != nil {
			t.Fatal(err)
		}
		if d := f.decide(t); d.Effect != policy.Allow {
			t.Errorf("after editing the link's target: %v by %s; want allow", d.Effect, d.Rule)
		}
	})
}

// countingClassifier answers yes and counts the questions.
type countingClassifier struct{ n atomic.Int64 }

func (c *countingClassifier) Classify(context.Context, string, *policy.CELOp) (bool, error) {
	c.n.Add(1)
	return true, nil
}

// TestLivePolicyClassifierCacheEndsWithTheSession: the gate asks the
// classifier once per session and operation; a session that ends (the
// kernel's Revoker) forgets its answers, so the engines, which outlive
// sessions, do not keep them.
func TestLivePolicyClassifierCacheEndsWithTheSession(t *testing.T) {
	f := newLiveFixture(t, false)
	cl := &countingClassifier{}
	f.live.classifier = cl
	f.write(t, "rules:\n  - id: installs\n    effect: block\n    classify: installs software\n    match: {tool: shell.exec, action: exec}\n")
	for range 2 {
		if d := f.decide(t); d.Effect != policy.Block || d.Rule != "installs" {
			t.Fatalf("%v by %s (%s); want block by installs", d.Effect, d.Rule, d.Reason)
		}
	}
	if n := cl.n.Load(); n != 1 {
		t.Errorf("the classifier was asked %d times for one operation of one session; want once", n)
	}
	f.live.EndSession("s1")
	f.decide(t)
	if n := cl.n.Load(); n != 2 {
		t.Errorf("after the session ended: %d questions; want the answer forgotten (2)", n)
	}
}
