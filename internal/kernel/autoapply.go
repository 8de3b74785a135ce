package kernel

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// Auto-apply: when a session's run ends because the model finished, the
// kernel applies its change set by itself if every configured criterion
// holds (config changeset.auto_apply); the decision and each criterion
// are audited, and the run's result tells the user which criterion failed
// when one did.

// PolicyExplainer judges an operation without using tokens up
// (*policy.Engine implements it).
type PolicyExplainer interface {
	Explain(ctx context.Context, op operation.Operation) policy.Decision
}

// AutoApplyOptions are the auto-apply criteria. Policy is required when
// Enabled: it returns the policy of a workspace.
type AutoApplyOptions struct {
	Enabled           bool
	MaxFiles          int // 0: no limit
	RequireTestsGreen bool
	AllowDeletions    bool
	AllowBinary       bool
	Policy            func(ctx context.Context, workspace string) (PolicyExplainer, error)
}

// Criterion is one auto-apply criterion and whether it held.
type Criterion struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// AutoApplyReport is an auto-apply evaluation.
type AutoApplyReport struct {
	Applied  bool        `json:"applied"`
	Criteria []Criterion `json:"criteria"`
	// Paths are the changed paths considered (applied when Applied).
	Paths []string `json:"paths"`
	// Error is why an apply whose criteria held failed (a conflict).
	Error string `json:"error,omitempty"`
}

// Met reports whether every criterion held.
func (r *AutoApplyReport) Met() bool {
	for _, c := range r.Criteria {
		if !c.OK {
			return false
		}
	}
	return true
}

// Summary is the report for a person, one line per failed criterion.
func (r *AutoApplyReport) Summary() string {
	switch {
	case r.Applied:
		return fmt.Sprintf("auto-applied %d path(s): every criterion held (%s)", len(r.Paths), criteriaNames(r.Criteria))
	case r.Error != "":
		return "auto-apply: the criteria held but the apply failed: " + r.Error
	}
	var b strings.Builder
	b.WriteString("not auto-applied:")
	for _, c := range r.Criteria {
		if !c.OK {
			fmt.Fprintf(&b, "\n  ✗ %s: %s", c.Name, c.Detail)
		}
	}
	return b.String()
}

func criteriaNames(cs []Criterion) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// AutoApplyInput is what the criteria are judged on.
type AutoApplyInput struct {
	Session, Workspace string
	Changes            []changeset.Change
	// Binary reports whether a changed file is binary.
	Binary func(rel string) (bool, error)
	// TDD is the session's TDD status (nil: no TDD record).
	TDD    *tdd.Status
	Policy PolicyExplainer
}

// EvaluateAutoApply judges every criterion (all of them, so the user
// hears every one that failed). It decides; it applies nothing.
func EvaluateAutoApply(ctx context.Context, o AutoApplyOptions, in AutoApplyInput) *AutoApplyReport {
	r := &AutoApplyReport{Paths: changedPaths(in.Changes)}
	add := func(name string, ok bool, detail string) {
		r.Criteria = append(r.Criteria, Criterion{Name: name, OK: ok, Detail: detail})
	}
	files := 0
	var deleted, binary []string
	for _, c := range in.Changes {
		if c.Kind == changeset.KindDir {
			continue
		}
		files++
		if c.Op == changeset.Deleted {
			deleted = append(deleted, c.Path)
			continue
		}
		if c.Kind == changeset.KindFile && in.Binary != nil {
			if b, err := in.Binary(c.Path); err != nil || b {
				binary = append(binary, c.Path)
			}
		}
	}
	if o.MaxFiles > 0 {
		add("max_files", files <= o.MaxFiles, fmt.Sprintf("%d changed path(s), at most %d", files, o.MaxFiles))
	}
	// Policy: writing each changed path must be allowed outright; a path
	// that needs approval (or is blocked) needs a person.
	switch {
	case in.Policy == nil:
		add("policy", false, "no policy engine to judge the paths")
	default:
		var bad []string
		for _, p := range r.Paths {
			abs := filepath.Join(in.Workspace, filepath.FromSlash(p))
			op := operation.Operation{Tool: "changeset.apply", Action: operation.Write,
				Paths:   []operation.Path{{Abs: abs, Raw: p, InWorkspace: true}},
				Session: operation.Session{ID: in.Session, Workspace: in.Workspace}}
			if d := in.Policy.Explain(ctx, op); d.Effect != policy.Allow {
				bad = append(bad, fmt.Sprintf("%s (%s by rule %s)", p, d.Effect, d.Rule))
			}
		}
		detail := "every changed path is allowed by policy without approval"
		if len(bad) > 0 {
			detail = "not allowed without approval: " + joinFirst(bad, 5)
		}
		add("policy", len(bad) == 0, detail)
	}
	if o.RequireTestsGreen {
		ok, detail := testsGreen(in.TDD)
		add("tests_green", ok, detail)
	}
	if !o.AllowDeletions {
		detail := "no deletions"
		if len(deleted) > 0 {
			detail = "deletes " + joinFirst(deleted, 5) + " (allow_deletions is off)"
		}
		add("no_deletions", len(deleted) == 0, detail)
	}
	if !o.AllowBinary {
		detail := "no binary files"
		if len(binary) > 0 {
			detail = "binary " + joinFirst(binary, 5) + " (allow_binary is off)"
		}
		add("no_binary", len(binary) == 0, detail)
	}
	return r
}

// testsGreen: the last test run passed and came after the last write.
func testsGreen(s *tdd.Status) (bool, string) {
	switch {
	case s == nil:
		return false, "the session has no TDD record"
	case s.LastRun == nil:
		return false, "no test run in this session"
	case s.LastRun.Outcome != testrun.Passed:
		return false, fmt.Sprintf("the last test run %s (%d passed, %d failed)", s.LastRun.Outcome, s.LastRun.Passed, s.LastRun.Failed)
	case s.LastRun.Seq < s.LastWriteSeq:
		return false, "files were written after the last test run"
	}
	return true, fmt.Sprintf("the last test run passed (%d tests) after the last write", s.LastRun.Passed)
}

func conflictPaths(ce *changeset.ConflictError) []string {
	out := make([]string, len(ce.Conflicts))
	for i, c := range ce.Conflicts {
		out[i] = c.Path
	}
	return out
}

func joinFirst(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(" and %d more", len(s)-n)
}

// autoApply evaluates the criteria at the end of a run and applies the
// change set when they hold; the summary goes to the session's clients as
// a context event. It returns nil when auto-apply is off or there is
// nothing to apply.
//
// First, after every run, it keeps base copies of the files the run's
// sandboxes changed while the real files are still the base, so that a
// later conflict can show three versions.
func (k *Kernel) autoApply(ctx context.Context, info Info, res RunResult, em *emitter) *AutoApplyReport {
	r := k.evalAutoApply(ctx, info, res)
	if r != nil {
		// Clients show context events as a line of their own ("· ..."):
		// the user hears what happened with the change set.
		em.emit(Event{Type: Type(agent.EventContext), Agent: &agent.Event{Type: agent.EventContext, Text: r.Summary()}})
	}
	return r
}

// evalAutoApply is autoApply without the event.
func (k *Kernel) evalAutoApply(ctx context.Context, info Info, res RunResult) *AutoApplyReport {
	cs, err := openChangeSet(info, k.o.OwnFiles)
	if err != nil {
		k.log.ErrorContext(ctx, "open the change set", "session", info.ID, "err", err)
		return nil
	}
	if _, err := cs.KeepBases(ctx); err != nil {
		k.log.WarnContext(ctx, "keep base copies", "session", info.ID, "err", err)
	}
	o := k.o.AutoApply
	// A sub-agent's changes go to its parent's change set through review
	// (mergeAfterRun), never to the workspace by themselves.
	if o == nil || !o.Enabled || info.Parent != "" || res.Fault != nil || res.Reason != string(agent.ReasonDone) {
		return nil
	}
	fail := func(err error) *AutoApplyReport {
		k.log.ErrorContext(ctx, "auto-apply", "session", info.ID, "err", err)
		return &AutoApplyReport{Error: err.Error()}
	}
	changes, err := cs.Changes(ctx)
	if err != nil {
		return fail(err)
	}
	if len(changes) == 0 {
		return nil
	}
	in := AutoApplyInput{Session: info.ID, Workspace: info.Workspace, Changes: changes, Binary: cs.IsBinary}
	if t := k.o.TDD; t != nil {
		if st, _, _, err := t.Journal.Load(ctx, info.ID); err == nil {
			in.TDD = &st
		}
	}
	if o.Policy != nil {
		if in.Policy, err = o.Policy(ctx, info.Workspace); err != nil {
			k.log.ErrorContext(ctx, "auto-apply: policy", "session", info.ID, "err", err)
			in.Policy = nil
		}
	}
	r := EvaluateAutoApply(ctx, *o, in)
	decision := "keep"
	if r.Met() {
		decision = "apply"
	}
	// The decision is durable before it is acted on.
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindChangesetAutoApply, Actor: "kernel", Payload: audit.ChangesetAutoApply{
		Decision: decision, Criteria: r.Criteria, Paths: r.Paths}}); err != nil {
		return fail(err)
	}
	if err := k.o.Audit.Flush(ctx); err != nil {
		return fail(err)
	}
	if !r.Met() {
		return r
	}
	unhold, err := k.holdUpper(ctx, cs)
	var applied []changeset.Change
	if err == nil {
		applied, err = cs.Apply(ctx)
		unhold()
	}
	if err != nil {
		r.Error = err.Error()
		var ce *changeset.ConflictError
		if errors.As(err, &ce) {
			r.Error = fmt.Sprintf("%d path(s) changed in the workspace since the change set began (%s); review with fluffy changeset diff", len(ce.Conflicts), joinFirst(conflictPaths(ce), 5))
		}
		if _, aerr := k.o.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindChangesetAutoApply, Actor: "kernel", Payload: audit.ChangesetAutoApply{
			Decision: "failed", Error: r.Error}}); aerr != nil {
			return fail(aerr)
		}
		return r
	}
	r.Applied, r.Paths = true, changedPaths(applied)
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindChangesetApply, Actor: "kernel", Payload: audit.ChangesetApply{
		Auto: true, Criteria: r.Criteria, Paths: r.Paths}}); err != nil {
		return fail(fmt.Errorf("audit changeset.apply: %w", err))
	}
	return r
}
