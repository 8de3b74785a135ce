package wiring

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/sessiontool"
)

// A sub-agent's rules may only tighten: an allow rule is refused before
// anything compiles, and what does not compile is refused too.
func TestCheckSubagentPolicy(t *testing.T) {
	for _, c := range []struct {
		rules string
		want  error // nil: accepted; errAny: some error
	}{
		{"version: 1\nrules:\n  - {id: no-net, effect: block, match: {action: net}}\n", nil},
		{`{"version": 1, "rules": [{"id": "ask-writes", "effect": "approve", "match": {"action": "write"}}]}`, nil},
		{"version: 1\nrules:\n  - {id: wide, effect: allow, match: {action: exec}}\n", ErrWidens},
		{"version: 1\nrules:\n  - {id: ok, effect: block, match: {action: net}}\n  - {id: sneaky, effect: allow, match: {tool: shell.exec}}\n", ErrWidens},
		{"version: 1\nrules:\n  - {id: typo, effect: block, match: {acton: net}}\n", errAny},
		{"version: 1\ntrust_project_allow: true\nrules: []\n", errAny},
		{"not: [yaml", errAny},
	} {
		err := checkSubagentPolicy([]byte(c.rules))
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%q refused: %v", c.rules, err)
		case c.want == errAny && err == nil:
			t.Errorf("%q accepted", c.rules)
		case c.want != nil && c.want != errAny && !errors.Is(err, c.want):
			t.Errorf("%q: %v, want %v", c.rules, err, c.want)
		}
	}
}

var errAny = errors.New("any error")

// gateFunc is a policy gate deciding with a function.
type gateFunc func(operation.Operation) policy.Decision

func (f gateFunc) Decide(_ context.Context, op operation.Operation) policy.Decision { return f(op) }

// A sub-agent's layers only ever make a decision stricter: a block in a
// layer beats the workspace's allow, a layer's silence changes nothing,
// and the workspace's block stands whatever a layer says.
func TestNarrowPolicy(t *testing.T) {
	ws := t.TempDir()
	inner := gateFunc(func(op operation.Operation) policy.Decision {
		if op.Tool == "shell.exec" {
			return policy.Decision{Effect: policy.Block, Rule: "user.no-exec", Reason: "no commands"}
		}
		return policy.Decision{Effect: policy.Allow, Rule: "default.read-workspace"}
	})
	n := &kernel.Narrowing{Policy: []string{
		"version: 1\nrules:\n  - {id: no-secrets, effect: block, match: {action: read, path: 'secrets/**'}}\n",
		"version: 1\nrules:\n  - {id: ask-exec, effect: approve, match: {tool: shell.exec}}\n  - {id: ask-notes, effect: approve, match: {path: 'notes/**'}}\n",
	}}
	g, err := newNarrowPolicy(inner, n)
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) operation.Operation {
		return operation.Operation{Tool: "fs.read", Action: operation.Read, Session: operation.Session{Workspace: ws},
			Paths: []operation.Path{{Abs: ws + "/" + rel, InWorkspace: true}}}
	}
	for _, c := range []struct {
		op   operation.Operation
		want policy.Effect
		rule string
	}{
		{read("README.md"), policy.Allow, "default.read-workspace"},
		{read("secrets/key"), policy.Block, "no-secrets"},
		{read("notes/a.md"), policy.Approve, "ask-notes"},
		{operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"ls"}, Session: operation.Session{Workspace: ws}}, policy.Block, "user.no-exec"},
	} {
		d := g.Decide(t.Context(), c.op)
		if d.Effect != c.want || d.Rule != c.rule {
			t.Errorf("%s %v: %s by %s (%s), want %s by %s", c.op.Tool, c.op.Paths, d.Effect, d.Rule, d.Reason, c.want, c.rule)
		}
	}
	// No layers: the workspace's gate itself.
	if g, _ := newNarrowPolicy(inner, &kernel.Narrowing{}); g == nil {
		t.Error("no gate for a sub-agent without rules of its own")
	} else if _, same := g.(gateFunc); !same {
		t.Errorf("a sub-agent without rules of its own gets %T, not its parent's gate", g)
	}
}

// A sub-agent's router holds only the tools it was given: not a tool its
// parent's registry gains later (a plugin), and its sessions.spawn sees
// only its own set as the parent set of its children.
func TestSubagentRegistry(t *testing.T) {
	reg := tool.NewRegistry()
	for _, name := range []string{"fs.read", "fs.write", "shell.exec"} {
		mustRegister(t, reg, name)
	}
	var kern atomic.Pointer[kernel.Kernel]
	narrowed, err := subagentTools(reg, 2, &kern, kernel.Env{Session: "s1", Narrowing: &kernel.Narrowing{Tools: []string{"fs.read", sessiontool.Spawn}}})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, reg, "web.fetch") // the parent's registry grows afterwards
	got := toolNames(narrowed)
	if strings.Join(got, ",") != "fs.read,sessions.spawn" {
		t.Fatalf("the sub-agent's tools: %v", got)
	}
	if _, err := narrowed.Lookup("fs.write"); !errors.Is(err, tool.ErrUnknownTool) {
		t.Fatalf("fs.write in the sub-agent's registry: %v", err)
	}
	// A top-level session keeps everything, the sessions.* tools added.
	reg = tool.NewRegistry()
	for _, name := range []string{"fs.write", "web.fetch"} {
		mustRegister(t, reg, name)
	}
	top, err := subagentTools(reg, 2, &kern, kernel.Env{Session: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]string{"fs.write", "web.fetch"}, sessiontool.Names()...) {
		if !slices.Contains(toolNames(top), n) {
			t.Errorf("the top-level session lacks %s", n)
		}
	}
	// sessions.max_depth 0: no sessions.* tools at all.
	none, err := subagentTools(tool.NewRegistry(), 0, &kern, kernel.Env{Session: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(toolNames(none)) != 0 {
		t.Errorf("max_depth 0 still offers %v", toolNames(none))
	}
}

func mustRegister(t *testing.T, reg *tool.Registry, name string) {
	t.Helper()
	tl, err := tool.New(tool.Definition[struct{}]{Name: name, Description: "test tool", Action: operation.Read,
		Execution: tool.Execution{Class: tool.FastPath},
		Normalize: func(context.Context, *tool.Resolver, *struct{}, *operation.Operation) error { return nil },
		Run:       func(context.Context, *struct{}) (tool.Result, error) { return tool.Result{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tl); err != nil {
		t.Fatal(err)
	}
}
