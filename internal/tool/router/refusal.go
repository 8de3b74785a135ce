package router

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// Gate names the step of the pipeline that refused a call.
type Gate string

// The gates that can refuse.
const (
	GateDecode    Gate = "decode"
	GateNormalize Gate = "normalize"
	GateState     Gate = "state"
	GatePolicy    Gate = "policy"
	GateApproval  Gate = "approval"
)

// Refusal is a refused call as the model sees it and the audit log keeps
// it: the gate, the deciding rule, the reason and what is allowed instead.
type Refusal struct {
	Gate    Gate   `json:"gate"`
	Rule    string `json:"rule"`
	Reason  string `json:"reason"`
	Subject string `json:"subject,omitempty"`
	Instead string `json:"instead,omitempty"`
}

// Text is the tool result shown to the model. The first line is stable:
// "refused by the <gate> gate (rule <rule>)".
func (f Refusal) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refused by the %s gate (rule %s)\n", f.Gate, f.Rule)
	fmt.Fprintf(&b, "reason: %s\n", oneLine(f.Reason))
	if f.Subject != "" {
		fmt.Fprintf(&b, "subject: %s\n", oneLine(f.Subject))
	}
	if f.Instead != "" {
		fmt.Fprintf(&b, "instead: %s\n", oneLine(f.Instead))
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func stateInstead(st tdd.Status) string {
	if n := st.Next(); n != "" {
		return n + " (TDD state " + string(st.State) + ", mode " + string(st.Mode) + ")"
	}
	return "follow the TDD cycle: failing test, code, green"
}

// policyInstead words what is allowed instead of a blocked operation.
func policyInstead(d policy.Decision, op *operation.Operation) string {
	switch d.Rule {
	case policy.RuleProtectedWrite, policy.RuleProtectedRead, policy.RuleProtectedArg:
		return "nothing touching this path is allowed (fluffy's own files, keys, policy and audit data); work on files of the workspace " + op.Session.Workspace
	case policy.RuleOutsideWrite:
		return "write inside the workspace " + op.Session.Workspace + "; your writes there go to the change set the user reviews"
	case policy.RuleMalformed, policy.RuleLimits:
		return "name canonical paths and keep commands and arguments short"
	}
	return "an operation no rule blocks; a blocked operation cannot be approved, so do not ask for it"
}

// RequestApprovalName is the tool through which the agent asks a person
// once for a whole plan.
const RequestApprovalName = "request_approval"

// PlanStep is one step of a plan: a tool call the agent intends to make.
type PlanStep struct {
	Tool string         `json:"tool" jsonschema:"the tool the step will call, e.g. shell.exec"`
	Args map[string]any `json:"args" jsonschema:"the arguments the step will pass, exactly as it will call the tool"`
	Note string         `json:"note,omitempty" jsonschema:"one line saying why the step is needed"`
}

// PlanIn is request_approval's input.
type PlanIn struct {
	Summary string     `json:"summary" jsonschema:"what the plan achieves, in one or two sentences for the person"`
	Steps   []PlanStep `json:"steps" jsonschema:"the steps that may need approval, in order"`
}

func (r *Router) requestApprovalTool() (*tool.Tool, error) {
	return tool.New(tool.Definition[PlanIn]{
		Name: RequestApprovalName,
		Description: "Ask the user once to approve a plan of tool calls that need a person's approval (commands, reads outside the workspace, network). " +
			"Each approved step may then be called once with exactly the same arguments without asking again, as long as the files it runs (its script, the Makefile, ...) are unchanged: an edit makes it a new step. Blocked steps cannot be approved.",
		Action:    operation.Read,
		Tags:      []string{"approval"},
		Execution: tool.Execution{Class: tool.FastPath},
		Normalize: func(context.Context, *tool.Resolver, *PlanIn, *operation.Operation) error { return nil },
		Run: func(context.Context, *PlanIn) (tool.Result, error) {
			return tool.Result{}, fmt.Errorf("request_approval runs in the router")
		},
	})
}

// runPlan decodes and normalizes every step as its own call would be, asks
// the person about the whole plan, and remembers the approved steps.
func (r *Router) runPlan(ctx context.Context, args tool.Args) (tool.Result, error) {
	in := args.Value().(*PlanIn)
	if len(in.Steps) == 0 {
		return tool.Result{Output: []byte("a plan needs at least one step"), IsError: true}, nil
	}
	steps := make([]approval.Step, 0, len(in.Steps))
	for i, s := range in.Steps {
		t, err := r.o.Registry.Lookup(s.Tool)
		if err != nil || t.Name() == RequestApprovalName {
			return tool.Result{Output: fmt.Appendf(nil, "step %d: %v", i+1, err), IsError: true}, nil
		}
		raw, err := jsonMarshal(s.Args)
		if err != nil {
			return tool.Result{Output: fmt.Appendf(nil, "step %d: %v", i+1, err), IsError: true}, nil
		}
		a, err := t.Decode(raw)
		if err != nil {
			return tool.Result{Output: fmt.Appendf(nil, "step %d (%s): %v", i+1, t.Name(), err), IsError: true}, nil
		}
		sess := r.session()
		op, err := t.Normalize(ctx, r.o.Resolver, a, sess)
		if err == nil && (op.CommandLine != "" || len(op.Argv) > 0) {
			paths := op.Paths
			op.Paths = nil
			err = policy.Normalize(op, r.o.Resolver.Workspace())
			op.Paths = paths
		}
		if err == nil {
			err = r.bind(t, op, a)
		}
		if err != nil {
			return tool.Result{Output: fmt.Appendf(nil, "step %d (%s): %v", i+1, t.Name(), err), IsError: true}, nil
		}
		shown := t.Preview(ctx, a)
		if shown == "" {
			shown = preview(op)
		}
		steps = append(steps, approval.Step{Op: *op, Note: s.Note, Preview: shown})
	}
	summary := in.Summary
	if source, ok := r.untrusted(); ok {
		summary += untrustedSuffix(source)
	}
	req, err := r.o.Approver.Ask(ctx, r.o.Session.ID, summary, steps)
	if err != nil {
		return tool.Result{}, fmt.Errorf("the approval could not be asked: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "approval request %s:\n", req.ID)
	// Approved steps become tokens when the router has Grants; a step
	// that cannot be scoped exactly falls back to the one-time approval
	// by signature. If no token can be issued at all, nothing is honoured
	// and each step is asked again when it runs. Either is bound to the
	// policy the step was shown under (its evaluation's digest), not to
	// the one in force now: after a change in between, the gate decides
	// anew and asks again.
	bySig := r.mint(req)
	r.mu.Lock()
	for _, it := range req.Items {
		fmt.Fprintf(&b, "step %d (%s): %s", it.N, it.Op.Tool, it.Decision.Verdict)
		if it.Decision.Reason != "" {
			fmt.Fprintf(&b, " — %s", it.Decision.Reason)
		}
		b.WriteByte('\n')
		if it.Decision.Verdict != approval.Approved || it.Eval.Effect != approval.EffectApprove {
			continue
		}
		if it.Op.Unbound != "" {
			continue // what it runs is not bound: asked when it runs
		}
		if bySig[it.N] {
			r.planned[plannedKey{sig: it.Op.Signature(), policy: r.shownPolicy(it)}]++
		}
	}
	r.mu.Unlock()
	b.WriteString("call each approved step once, with exactly the arguments of the plan.")
	return tool.Result{Output: []byte(b.String())}, nil
}

// mint turns the approved steps of req into tokens when the router has
// Grants, each bound to the policy it was shown under, and returns the
// steps to honour once by signature instead: all of them without Grants,
// those no token can cover exactly with them.
func (r *Router) mint(req approval.Request) map[int]bool {
	bySig := map[int]bool{}
	if r.o.Grants == nil {
		for _, it := range req.Items {
			bySig[it.N] = true
		}
		return bySig
	}
	groups := map[string][]approval.Item{}
	for _, it := range req.Items {
		d := r.shownPolicy(it)
		groups[d] = append(groups[d], it)
	}
	for _, d := range slices.Sorted(maps.Keys(groups)) {
		sub := req
		sub.Items = groups[d]
		_, skipped, err := r.o.Grants.Mint(sub, d)
		if err != nil {
			r.o.Logger.Warn("approved steps got no tokens; they will be asked again", "err", err)
			continue
		}
		for n := range skipped {
			bySig[n] = true
		}
	}
	return bySig
}

// shownPolicy is the digest of the policy an approval request showed
// step it under: its evaluation's, else the gate's now.
func (r *Router) shownPolicy(it approval.Item) string {
	if it.Eval.Policy != "" {
		return it.Eval.Policy
	}
	return r.policyDigest()
}

func jsonMarshal(v map[string]any) ([]byte, error) {
	if v == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(v)
}

// policyDigest is the digest of the policy gate's rules (policy
// Engine.Digest) that tokens minted now are bound to; "" when the gate
// does not say, and then no token is minted.
func (r *Router) policyDigest() string {
	if d, ok := r.o.Policy.(interface{ Digest() string }); ok {
		return d.Digest()
	}
	return ""
}
