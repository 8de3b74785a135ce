package approval

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// Decider is the part of the policy engine the approval flow uses;
// *policy.Engine satisfies it.
type Decider interface {
	Explain(ctx context.Context, op operation.Operation) policy.Decision
}

// PolicyEvaluator evaluates plan steps with the policy engine. It uses
// Explain, which never uses presented tokens up: pre-evaluating a plan
// must not spend what a person approved earlier.
type PolicyEvaluator struct {
	Engine Decider
}

// Evaluate implements Evaluator.
func (p PolicyEvaluator) Evaluate(ctx context.Context, op operation.Operation) (Evaluation, error) {
	if p.Engine == nil {
		return Evaluation{}, errors.New("approval: no policy engine")
	}
	d := p.Engine.Explain(ctx, op)
	ev := Evaluation{Rule: d.Rule, Reason: d.Reason, Policy: d.Policy}
	switch d.Effect {
	case policy.Allow:
		ev.Effect = EffectAllow
	case policy.Approve:
		ev.Effect = EffectApprove
	case policy.Block:
		ev.Effect = EffectBlock
	default:
		return Evaluation{}, fmt.Errorf("approval: policy answered effect %v", d.Effect)
	}
	return ev, nil
}

// Appender is the part of the audit log the approval flow writes to;
// *audit.Log satisfies it.
type Appender interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
}

// AuditRecorder records approval events in the audit log. Both kinds are
// synchronous there: Append returns once the entry is durable, so the
// broker's "recorded before shown, recorded before it counts" holds.
type AuditRecorder struct {
	Log Appender
}

// Record implements Recorder.
func (r AuditRecorder) Record(ctx context.Context, ev Event) error {
	if r.Log == nil {
		return errors.New("approval: no audit log")
	}
	p := audit.ApprovalRequest{EventKind: audit.Kind(ev.Kind), RequestID: ev.RequestID, Session: ev.Session,
		Who: audit.ApprovalWho{Name: ev.Who.Name, Channel: ev.Who.Channel}, Items: ev.Items}
	var payload audit.Payload
	switch p.EventKind {
	case audit.KindApprovalRequest:
		payload = p
	case audit.KindApprovalDecision:
		payload = audit.ApprovalDecision(p)
	default:
		return fmt.Errorf("approval: unknown event kind %q", ev.Kind)
	}
	actor := ev.Who.Name
	if ev.Who.Channel != "" {
		actor += "@" + ev.Who.Channel
	}
	if _, err := r.Log.Append(ctx, audit.Entry{Session: ev.Session, Kind: payload.Kind(), Actor: actor, Payload: payload}); err != nil {
		return fmt.Errorf("approval: audit %s: %w", ev.Kind, err)
	}
	return nil
}
