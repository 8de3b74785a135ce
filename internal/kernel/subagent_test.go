package kernel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// startTree starts a kernel whose sessions may spawn sub-agents within
// lim, with 10 turns a session; a sub-agent's rules are refused when
// they hold "allow" (standing in for the policy engine's check).
func startTree(t *testing.T, e *env, lim kernel.SubagentLimits) *kernel.Kernel {
	t.Helper()
	k, err := kernel.Start(t.Context(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env}, nil
		},
		Limits:    agent.Limits{MaxTurns: 10},
		Subagents: lim,
		CheckPolicy: func(b []byte) error {
			if strings.Contains(string(b), "allow") {
				return errors.New("rule r1: allow would loosen the parent's policy")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background(), "test") })
	return k
}

func refusals(t *testing.T, e *env) []audit.SessionRefused {
	t.Helper()
	var out []audit.SessionRefused
	must(t, e.audit.Reader().Entries(context.Background(), audit.Filter{Kind: audit.KindSessionRefused}, func(en audit.Entry) error {
		p, err := audit.DecodePayload(en.Kind, en.Payload.(json.RawMessage))
		if err != nil {
			return err
		}
		out = append(out, p.(audit.SessionRefused))
		return nil
	}))
	return out
}

var parentTools = []string{"fs.read", "fs.write", "sessions.spawn"}

// Every way a child could get more than its parent is refused with its
// typed error and audited as session.refused with its code.
func TestSpawnOnlyNarrows(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	k := startTree(t, e, kernel.SubagentLimits{MaxDepth: 2, MaxChildren: 2})
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	spawn := func(parent string, p kernel.SpawnParams) (kernel.Info, error) {
		p.Parent = parent
		if p.Task == "" {
			p.Task = "sub"
		}
		if p.ParentTools == nil {
			p.ParentTools = parentTools
		}
		return k.Spawn(ctx, p)
	}
	cases := []struct {
		name string
		p    kernel.SpawnParams
		want error
		code string
	}{
		{"wider tool set", kernel.SpawnParams{Tools: []string{"fs.read", "shell.exec"}}, kernel.ErrSpawnTool, "tool"},
		{"allow rule", kernel.SpawnParams{Policy: "version: 1\nrules:\n  - {id: r1, effect: allow, match: {action: exec}}\n"}, kernel.ErrSpawnPolicy, "policy"},
		{"more turns than left", kernel.SpawnParams{Budget: kernel.Budget{Turns: 11}}, kernel.ErrSpawnBudget, "budget"},
	}
	for _, c := range cases {
		_, err := spawn(root.ID, c.p)
		var se *kernel.SpawnError
		if !errors.Is(err, c.want) || !errors.As(err, &se) || se.Code != c.code {
			t.Fatalf("%s: %v, want %v with code %s", c.name, err, c.want, c.code)
		}
	}
	if r := refusals(t, e); len(r) != 3 || r[0].Tool != "shell.exec" || r[1].Code != "policy" || r[2].Code != "budget" {
		t.Fatalf("refusals audited: %+v", r)
	}

	// A child asking for no tools in particular gets the parent's set,
	// never more; its budget is carved out of the parent's.
	a, err := spawn(root.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 6}, Tools: []string{"fs.read", "sessions.spawn"}})
	must(t, err)
	if a.Parent != root.ID || a.Root != root.ID || a.Depth != 1 || a.Narrowing == nil || strings.Join(a.Narrowing.Tools, ",") != "fs.read,sessions.spawn" {
		t.Fatalf("child %+v %+v", a, a.Narrowing)
	}
	left, err := k.Remaining(ctx, root)
	must(t, err)
	if left.Turns != 4 {
		t.Fatalf("parent has %d turns left after handing 6 of 10, want 4", left.Turns)
	}
	if _, err := spawn(root.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 5}}); !errors.Is(err, kernel.ErrSpawnBudget) {
		t.Fatalf("second child asking 5 of 4 turns left: %v", err)
	}

	// The grandchild: its parent's router offers fs.write (registered
	// after the spawn, say by a plugin), but fs.write was not given to
	// the child, so the grandchild cannot have it.
	_, err = spawn(a.ID, kernel.SpawnParams{Tools: []string{"fs.write"}, ParentTools: parentTools, Budget: kernel.Budget{Turns: 1}})
	var se *kernel.SpawnError
	if !errors.As(err, &se) || !errors.Is(err, kernel.ErrSpawnTool) || se.Tool != "fs.write" {
		t.Fatalf("grandchild asking for a tool its parent was not given: %v", err)
	}
	g, err := spawn(a.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 1}, ParentTools: parentTools})
	must(t, err)
	if strings.Join(g.Narrowing.Tools, ",") != "fs.read,sessions.spawn" || g.Root != root.ID || g.Parent != a.ID || g.Depth != 2 {
		t.Fatalf("grandchild %+v %+v", g, g.Narrowing)
	}
	// Depth: the grandchild is at sessions.max_depth.
	if _, err := spawn(g.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 0}}); !errors.Is(err, kernel.ErrSpawnDepth) {
		t.Fatalf("past the depth limit: %v", err)
	}
	// Fan-out: the root has spawned two sub-agents (a, and the refused
	// ones do not count) — one more is allowed, then none.
	_, err = spawn(root.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 1}})
	must(t, err)
	if _, err := spawn(root.ID, kernel.SpawnParams{Budget: kernel.Budget{Turns: 1}}); !errors.Is(err, kernel.ErrSpawnFanOut) {
		t.Fatalf("past the fan-out limit: %v", err)
	}
	codes := []string{}
	for _, r := range refusals(t, e) {
		codes = append(codes, r.Code)
	}
	if got := strings.Join(codes, ","); got != "tool,policy,budget,budget,tool,depth,fanout" {
		t.Fatalf("refusal codes %s", got)
	}
}

// A session reads the transcripts of its own descendants only: not a
// sibling's, not its parent's, not its own through this door.
func TestHistoryScope(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	k := startTree(t, e, kernel.SubagentLimits{MaxDepth: 2, MaxChildren: 4})
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	sp := func(parent string) kernel.Info {
		i, err := k.Spawn(ctx, kernel.SpawnParams{Parent: parent, Task: "sub of " + parent, ParentTools: parentTools, Budget: kernel.Budget{Turns: 2}})
		must(t, err)
		return i
	}
	a, b := sp(root.ID), sp(root.ID)
	ga := sp(a.ID)
	other, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	for _, c := range []struct {
		caller, target string
		ok             bool
	}{
		{root.ID, a.ID, true}, {root.ID, ga.ID, true}, {a.ID, ga.ID, true},
		{a.ID, b.ID, false}, {a.ID, root.ID, false}, {ga.ID, a.ID, false}, {a.ID, a.ID, false},
		{other.ID, a.ID, false}, {a.ID, "s000000000000", false},
	} {
		_, msgs, err := k.Transcript(ctx, c.caller, c.target)
		if c.ok && (err != nil || len(msgs) == 0 || !strings.HasPrefix(msgs[0].Text(), "sub of")) {
			t.Fatalf("%s reading %s: %v %v", c.caller, c.target, msgs, err)
		}
		var se *kernel.SpawnError
		if !c.ok && (!errors.Is(err, kernel.ErrScope) || !errors.As(err, &se) || se.Target != c.target) {
			t.Fatalf("%s reading %s: %v, want ErrScope", c.caller, c.target, err)
		}
	}
	if _, err := k.RunChild(ctx, a.ID, b.ID, "hi", true); !errors.Is(err, kernel.ErrScope) {
		t.Fatalf("a sending to its sibling: %v", err)
	}
	r := refusals(t, e)
	if len(r) != 7 || r[0].Op != "history" || r[0].Code != "scope" || r[0].Target != b.ID || r[6].Op != "send" {
		t.Fatalf("refusals audited: %+v", r)
	}

	// Reading an untrusted sub-agent's words makes the reader untrusted,
	// before it gets them; its sibling stays clean.
	if _, err := k.MarkUntrusted(ctx, ga.ID, "webhook test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Transcript(ctx, a.ID, ga.ID); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{a.ID: true, b.ID: false, root.ID: false} {
		i, err := k.Get(ctx, id)
		must(t, err)
		if (i.Untrusted != "") != want || want && i.Untrusted != "sub-agent "+ga.ID {
			t.Errorf("session %s untrusted %q, want %v", id, i.Untrusted, want)
		}
	}
}

// A child runs as any session does, its answer comes back to the
// caller, every audit entry of its session names its parent and root,
// and it is born with its parent's untrusted mark.
func TestChildRunAndTree(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	k := startTree(t, e, kernel.SubagentLimits{MaxDepth: 1, MaxChildren: 4})
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	if _, err := k.MarkUntrusted(ctx, root.ID, "webhook test"); err != nil {
		t.Fatal(err)
	}
	root, err = k.Get(ctx, root.ID)
	must(t, err)
	c, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "write hello", ParentTools: []string{"write"}, Budget: kernel.Budget{Turns: 3}})
	must(t, err)
	if !strings.Contains(c.Untrusted, "webhook test") {
		t.Fatalf("child's untrusted mark %q, want its parent's", c.Untrusted)
	}
	res, err := k.RunChild(ctx, root.ID, c.ID, "", true)
	must(t, err)
	if res.Text != "done" || res.Reason != string(agent.ReasonDone) {
		t.Fatalf("child's run: %+v", res)
	}
	kids, err := k.Children(ctx, root.ID)
	must(t, err)
	if len(kids) != 1 || kids[0].ID != c.ID || kids[0].Turns != 2 {
		t.Fatalf("children %+v", kids)
	}
	n := 0
	must(t, e.audit.Reader().Entries(ctx, audit.Filter{Session: c.ID}, func(en audit.Entry) error {
		n++
		if en.Parent != root.ID || en.Root != root.ID {
			t.Errorf("entry %d (%s) of the child: parent %q root %q", en.Seq, en.Kind, en.Parent, en.Root)
		}
		return nil
	}))
	must(t, e.audit.Reader().Entries(ctx, audit.Filter{Session: root.ID}, func(en audit.Entry) error {
		if en.Parent != "" || en.Root != "" {
			t.Errorf("entry %d (%s) of the top-level session carries parent %q root %q", en.Seq, en.Kind, en.Parent, en.Root)
		}
		return nil
	}))
	if n < 3 {
		t.Fatalf("the child has %d audit entries", n)
	}
	// A child stops at its own budget, whatever the kernel's limits.
	one, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "write hello", ParentTools: []string{"write"}, Budget: kernel.Budget{Turns: 1}})
	must(t, err)
	if res, err := k.RunChild(ctx, root.ID, one.ID, "", true); err != nil || res.Reason != string(agent.ReasonMaxTurns) {
		t.Fatalf("a child with one turn: %+v %v", res, err)
	}
	// Its sub-agents end with the parent.
	if _, err := k.Close(ctx, kernel.CloseParams{ID: root.ID}); err != nil {
		t.Fatal(err)
	}
	if c, err = k.Get(ctx, c.ID); err != nil || c.Status != kernel.StatusClosed {
		t.Fatalf("the child after its parent closed: %s %v", c.Status, err)
	}
	// And are removed with it.
	if _, err := k.Remove(ctx, kernel.RemoveParams{ID: root.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Get(ctx, c.ID); !errors.Is(err, kernel.ErrNotFound) {
		t.Fatalf("the child after its parent was removed: %v", err)
	}
}

// reviewer answers every merge review with verdict, keeping what it was
// asked.
type reviewer struct {
	verdict approval.Verdict
	asked   []approval.Step
}

func (r *reviewer) Ask(_ context.Context, session, _ string, steps []approval.Step) (approval.Request, error) {
	r.asked = append(r.asked, steps...)
	req := approval.Request{ID: "r1", Session: session}
	for i, s := range steps {
		req.Items = append(req.Items, approval.Item{N: i + 1, Step: s, Decision: approval.Decision{Verdict: r.verdict}})
	}
	return req, nil
}

// A sub-agent's writes reach its parent's change set only through a
// review showing the diff: approved, they move there; denied, they stay
// in the child's change set and the parent's is untouched.
func TestMergeThroughReview(t *testing.T) {
	for _, verdict := range []approval.Verdict{approval.Approved, approval.Denied} {
		t.Run(string(verdict), func(t *testing.T) {
			ws := newWorkspace(t)
			e := openEnv(t, t.TempDir(), ws)
			defer e.close()
			rv := &reviewer{verdict: verdict}
			k, err := kernel.Start(t.Context(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
				Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
					return &writeTools{env: env}, nil
				},
				Subagents: kernel.SubagentLimits{MaxDepth: 1, MaxChildren: 1}, Reviewer: rv})
			must(t, err)
			defer k.Stop(context.Background(), "test")
			ctx := t.Context()
			root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
			must(t, err)
			c, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "write hello", ParentTools: []string{"write"}})
			must(t, err)
			res, err := k.RunChild(ctx, root.ID, c.ID, "", true)
			must(t, err)
			if res.Merge == nil || res.Merge.Merged != (verdict == approval.Approved) || strings.Join(res.Merge.Paths, ",") != "hello.go" {
				t.Fatalf("merge %+v", res.Merge)
			}
			if len(rv.asked) != 1 || rv.asked[0].Op.Tool != kernel.MergeTool || !strings.Contains(rv.asked[0].Preview, "+package hello") {
				t.Fatalf("asked %+v", rv.asked)
			}
			_, pch, err := k.Diff(ctx, root.ID)
			must(t, err)
			_, cch, err := k.Diff(ctx, c.ID)
			must(t, err)
			if merged := verdict == approval.Approved; merged != (len(pch) == 1) || merged != (len(cch) == 0) {
				t.Fatalf("after %s: parent's changes %v, child's %v", verdict, pch, cch)
			}
		})
	}
}

// A sub-agent left running in the background is cancelled when the
// kernel stops, and stays resumable; Stop waits for its run to end.
func TestStopCancelsBackgroundChild(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	blocked := make(chan struct{}, 1)
	k, err := kernel.Start(t.Context(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(blockScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env, ready: func() { blocked <- struct{}{} }}, nil
		},
		Subagents: kernel.SubagentLimits{MaxDepth: 1, MaxChildren: 1}})
	must(t, err)
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	c, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "block", ParentTools: []string{"write", "block"}})
	must(t, err)
	res, err := k.RunChild(ctx, root.ID, c.ID, "", false)
	must(t, err)
	if res.Status != kernel.StatusRunning {
		t.Fatalf("a child started in the background: %+v", res)
	}
	<-blocked
	must(t, k.Stop(ctx, "test"))
	c, err = k.Get(ctx, c.ID)
	must(t, err)
	if c.Status != kernel.StatusPaused || !c.Resumable() {
		t.Fatalf("the background child after Stop: %s", c.Status)
	}
	if _, err := k.RunChild(ctx, root.ID, c.ID, "", false); !errors.Is(err, kernel.ErrStopping) {
		t.Fatalf("a run after Stop: %v, want ErrStopping", err)
	}
}

// A sub-agent run in the background is reviewed before its run counts as
// ended: whoever waits for it (sessions.list, sessions.history with
// wait) finds the review done.
func TestMergeBeforeBackgroundRunEnds(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	rv := &reviewer{verdict: approval.Approved}
	k, err := kernel.Start(t.Context(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env}, nil
		},
		Subagents: kernel.SubagentLimits{MaxDepth: 1, MaxChildren: 1}, Reviewer: rv})
	must(t, err)
	defer k.Stop(context.Background(), "test")
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	c, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "write hello", ParentTools: []string{"write"}})
	must(t, err)
	if _, err := k.RunChild(ctx, root.ID, c.ID, "", false); err != nil {
		t.Fatal(err)
	}
	must(t, k.WaitChild(ctx, c.ID))
	_, pch, err := k.Diff(ctx, root.ID)
	must(t, err)
	if len(rv.asked) != 1 || len(pch) != 1 || pch[0].Path != "hello.go" {
		t.Fatalf("after the wait: asked %d, parent's changes %v", len(rv.asked), pch)
	}
}

type allowAll struct{}

func (allowAll) Explain(context.Context, operation.Operation) policy.Decision {
	return policy.Decision{Effect: policy.Allow, Rule: "test"}
}

// A sub-agent's change set reaches the workspace only through the
// reviewed merge into its parent's: applying it directly (session close
// --apply, changes apply, auto-apply at the end of its run) is refused
// with *SubagentApplyError naming the parent, and the workspace is
// untouched; discarding it stays allowed.
func TestSubagentChangesNotAppliedDirectly(t *testing.T) {
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	aa := kernel.AutoApplyOptions{Enabled: true, AllowDeletions: true, AllowBinary: true,
		Policy: func(context.Context, string) (kernel.PolicyExplainer, error) { return allowAll{}, nil }}
	k, err := kernel.Start(t.Context(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env}, nil
		},
		AutoApply: &aa,
		Subagents: kernel.SubagentLimits{MaxDepth: 1, MaxChildren: 1}, Reviewer: &reviewer{verdict: approval.Denied}})
	must(t, err)
	defer k.Stop(context.Background(), "test")
	ctx := t.Context()
	root, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	c, err := k.Spawn(ctx, kernel.SpawnParams{Parent: root.ID, Task: "write hello", ParentTools: []string{"write"}})
	must(t, err)
	res, err := k.RunChild(ctx, root.ID, c.ID, "", true)
	must(t, err)
	if res.AutoApply != nil && res.AutoApply.Applied {
		t.Fatalf("a sub-agent's run auto-applied: %+v", res.AutoApply)
	}
	real := filepath.Join(ws, "hello.go")
	if _, err := os.Stat(real); err == nil {
		t.Fatal("the sub-agent's hello.go reached the workspace at the end of its run")
	}
	_, cch, err := k.Diff(ctx, c.ID)
	must(t, err)
	if len(cch) != 1 {
		t.Fatalf("the child's changes after a denied merge: %v", cch)
	}
	check := func(how string, err error) {
		t.Helper()
		var se *kernel.SubagentApplyError
		if !errors.As(err, &se) || !errors.Is(err, kernel.ErrSubagentApply) || se.Session != c.ID || se.Parent != root.ID {
			t.Fatalf("%s: %v, want a *SubagentApplyError for %s under %s", how, err, c.ID, root.ID)
		}
		if !strings.Contains(err.Error(), "fluffy session close --apply "+root.ID) {
			t.Errorf("%s: the message does not say what to do: %v", how, err)
		}
		if _, err := os.Stat(real); err == nil {
			t.Fatalf("%s wrote the sub-agent's hello.go into the workspace", how)
		}
	}
	_, err = k.Close(ctx, kernel.CloseParams{ID: c.ID, Apply: true})
	check("close --apply", err)
	_, err = k.Changes().Apply(ctx, kernel.ChangesParams{Session: c.ID})
	check("changes apply", err)
	if cr, err := k.Close(ctx, kernel.CloseParams{ID: c.ID}); err != nil || !cr.Discarded {
		t.Fatalf("close without --apply: %+v, %v", cr, err)
	}
}
