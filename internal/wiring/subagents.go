package wiring

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/tool/sessiontool"
)

// Sub-agents (docs/subagents.md): the kernel decides what a child may
// have; this file gives a session the sessions.* tools over the kernel
// and builds a child's tools from what it was given (kernel.Narrowing):
// no tool outside its set, and its policy layers on top of the
// workspace's policy.

// subagentSource names a sub-agent's own rules in decisions and errors.
const subagentSource = "sessions.spawn policy"

// ErrWidens: a sub-agent's rules hold an allow rule.
var ErrWidens = errors.New("a sub-agent's rules may only tighten (effect approve or block)")

// checkSubagentPolicy is the kernel's CheckPolicy: a sub-agent's rules
// compile as a policy file and hold no allow rule (an allow could only
// loosen what the parent's policy decides).
func checkSubagentPolicy(rules []byte) error {
	var f struct {
		Rules []struct {
			ID     string `yaml:"id"`
			Effect string `yaml:"effect"`
		} `yaml:"rules"`
	}
	if err := yaml.Unmarshal(rules, &f); err != nil {
		return fmt.Errorf("%s: %w", subagentSource, err)
	}
	for _, r := range f.Rules {
		if r.Effect == policy.Allow.String() {
			return fmt.Errorf("rule %q: %w", r.ID, ErrWidens)
		}
	}
	_, err := compileSubagentPolicy(rules)
	return err
}

// compileSubagentPolicy compiles one layer of a sub-agent's rules. It is
// a project layer, so the engine refuses an allow rule too; only the
// layer's own matches count (narrowPolicy), never its defaults.
func compileSubagentPolicy(rules []byte) (*policy.Engine, error) {
	return policy.Compile(policy.Options{Default: policy.Allow}, policy.Source{Name: subagentSource, Layer: policy.LayerProject, Data: rules})
}

// narrowPolicy is a sub-agent's policy gate: the workspace's policy as
// the parent has it, then each layer of the child's rules, the
// strictest winning. A layer that names no rule for an operation
// changes nothing; one that does can only make it stricter.
type narrowPolicy struct {
	inner  router.PolicyGate
	layers []*policy.Engine
}

func newNarrowPolicy(inner router.PolicyGate, n *kernel.Narrowing) (router.PolicyGate, error) {
	if n == nil || len(n.Policy) == 0 {
		return inner, nil
	}
	p := &narrowPolicy{inner: inner}
	for _, text := range n.Policy {
		e, err := compileSubagentPolicy([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("a sub-agent's rules no longer compile: %w", err)
		}
		p.layers = append(p.layers, e)
	}
	return p, nil
}

// Decide implements router.PolicyGate.
func (p *narrowPolicy) Decide(ctx context.Context, op operation.Operation) policy.Decision {
	d := p.inner.Decide(ctx, op)
	for _, e := range p.layers {
		ld := e.Decide(ctx, op)
		for _, m := range ld.Matched {
			if m.Layer != policy.LayerProject || m.Effect <= d.Effect {
				continue
			}
			reason := m.Message
			if reason == "" {
				reason = fmt.Sprintf("rule %s of the sub-agent's own policy: %s", m.Rule, m.Effect)
			}
			d = policy.Decision{Effect: m.Effect, Rule: m.Rule, Layer: m.Layer, Source: subagentSource, Reason: reason,
				Subject: m.Subject, Policy: d.Policy, Matched: append(d.Matched, m)}
		}
	}
	return d
}

// Digest is the workspace policy's: capability tokens are minted and
// checked under it; the child's layers are decided again at every call.
func (p *narrowPolicy) Digest() string {
	if d, ok := p.inner.(interface{ Digest() string }); ok {
		return d.Digest()
	}
	return ""
}

// subagentTools adds the sessions.* tools to a session's registry (when
// config sessions.max_depth allows any sub-agent) and, for a sub-agent,
// returns the registry holding only the tools it was given.
func subagentTools(reg *tool.Registry, maxDepth int, kern *atomic.Pointer[kernel.Kernel], env kernel.Env) (*tool.Registry, error) {
	var tr *sessionTree
	if maxDepth > 0 && kern != nil {
		tr = &sessionTree{kern: kern, caller: env.Session}
		if err := sessiontool.Register(reg, tr); err != nil {
			return nil, err
		}
	}
	if env.Narrowing != nil {
		var err error
		if reg, err = narrowRegistry(reg, env.Narrowing.Tools); err != nil {
			return nil, err
		}
	}
	if tr != nil {
		// The caller's tool set is what its registry holds when it asks
		// (the router adds request_approval to it).
		tr.tools = func() []string { return toolNames(reg) }
	}
	return reg, nil
}

// narrowRegistry is reg holding only the tools named in keep.
func narrowRegistry(reg *tool.Registry, keep []string) (*tool.Registry, error) {
	out := tool.NewRegistry()
	for _, t := range reg.List() {
		if slices.Contains(keep, t.Name()) {
			if err := out.Register(t); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// toolNames lists reg's tools.
func toolNames(reg *tool.Registry) []string {
	var out []string
	for _, t := range reg.List() {
		out = append(out, t.Name())
	}
	return out
}

// sessionTree is one session's sessiontool.Tree over the kernel.
type sessionTree struct {
	kern   *atomic.Pointer[kernel.Kernel]
	caller string
	// tools is the caller's tool set as its router offers it now.
	tools func() []string
}

var _ sessiontool.Tree = (*sessionTree)(nil)

func (s *sessionTree) kernel() (*kernel.Kernel, error) {
	k := s.kern.Load()
	if k == nil {
		return nil, errors.New("the kernel is not ready")
	}
	return k, nil
}

func (s *sessionTree) Spawn(ctx context.Context, r sessiontool.Request) (sessiontool.Child, error) {
	k, err := s.kernel()
	if err != nil {
		return sessiontool.Child{}, err
	}
	i, err := k.Spawn(ctx, kernel.SpawnParams{Parent: s.caller, Task: r.Task, Tools: r.Tools, ParentTools: s.tools(), Policy: r.Policy,
		Budget: kernel.Budget{Turns: r.Budget.Turns, Tokens: r.Budget.Tokens, Cost: r.Budget.Cost, Time: r.Budget.Time}})
	if err != nil {
		return sessiontool.Child{}, err
	}
	return childOf(i), nil
}

func (s *sessionTree) Run(ctx context.Context, id, message string, wait bool) (sessiontool.Outcome, error) {
	k, err := s.kernel()
	if err != nil {
		return sessiontool.Outcome{}, err
	}
	res, err := k.RunChild(ctx, s.caller, id, message, wait)
	if err != nil {
		return sessiontool.Outcome{}, err
	}
	o := sessiontool.Outcome{Reason: res.Reason, Text: res.Text}
	if res.Fault != nil {
		o.Error = res.Fault.Message
	}
	if m := res.Merge; m != nil {
		if m.Merged {
			o.Merge = fmt.Sprintf("merged into your change set after a person's review: %s", strings.Join(m.Paths, ", "))
		} else {
			o.Merge = fmt.Sprintf("not merged (%s): %s", m.Reason, strings.Join(m.Paths, ", "))
		}
	}
	return o, nil
}

func (s *sessionTree) List(ctx context.Context, wait bool) ([]sessiontool.Child, error) {
	k, err := s.kernel()
	if err != nil {
		return nil, err
	}
	t, err := k.Tree(ctx, s.caller)
	if err != nil {
		return nil, err
	}
	var out []sessiontool.Child
	var walk func(n kernel.TreeNode, depth int) error
	walk = func(n kernel.TreeNode, depth int) error {
		for _, c := range n.Children {
			if wait {
				if err := k.WaitChild(ctx, c.ID); err != nil {
					return err
				}
			}
			// Read again after the wait; reading its words taints the
			// caller when the child is untrusted (kernel.Transcript).
			info, msgs, err := k.Transcript(ctx, s.caller, c.ID)
			if err != nil {
				return err
			}
			ch := childOf(info)
			ch.Depth = depth
			if info.Status != kernel.StatusRunning {
				ch.Answer = lastAnswer(msgs)
			}
			out = append(out, ch)
			if err := walk(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(t, 1)
}

// lastAnswer is the text of the conversation's last model message.
func lastAnswer(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			return msgs[i].Text()
		}
	}
	return ""
}

func (s *sessionTree) History(ctx context.Context, id string, wait bool) (sessiontool.Child, []llm.Message, error) {
	k, err := s.kernel()
	if err != nil {
		return sessiontool.Child{}, nil, err
	}
	if wait {
		// Only a descendant's run is waited for.
		if _, err := k.Descendant(ctx, "history", s.caller, id); err != nil {
			return sessiontool.Child{}, nil, err
		}
		if err := k.WaitChild(ctx, id); err != nil {
			return sessiontool.Child{}, nil, err
		}
	}
	i, msgs, err := k.Transcript(ctx, s.caller, id)
	if err != nil {
		return sessiontool.Child{}, nil, err
	}
	return childOf(i), msgs, nil
}

func childOf(i kernel.Info) sessiontool.Child {
	c := sessiontool.Child{ID: i.ID, Parent: i.Parent, Task: i.Task, Depth: i.Depth, Status: string(i.Status), Reason: i.StopReason,
		Turns: i.Turns, Tokens: i.Usage.Total(), Cost: i.Cost, Untrusted: i.Untrusted != ""}
	if n := i.Narrowing; n != nil {
		c.Tools = n.Tools
		c.Budget = sessiontool.Budget{Turns: n.Budget.Turns, Tokens: n.Budget.Tokens, Cost: n.Budget.Cost, Time: n.Budget.Time}
	}
	return c
}
