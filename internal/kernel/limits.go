package kernel

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/agent"
)

// RunLimits tighten the kernel's limits for one run (a scheduled job's
// budget): a zero field leaves the kernel's limit as it is, and a limit
// is only ever lowered, never raised.
type RunLimits struct {
	MaxTurns int
	MaxCost  float64
}

type runLimitsKey struct{}

// WithRunLimits returns ctx carrying l for the run it starts (Run,
// RunMessage): a budget belongs to the one request, not to the session.
func WithRunLimits(ctx context.Context, l RunLimits) context.Context {
	return context.WithValue(ctx, runLimitsKey{}, l)
}

// limitsFor is base tightened by the run limits ctx carries.
func limitsFor(ctx context.Context, base agent.Limits) agent.Limits {
	l, ok := RunLimitsFrom(ctx)
	if !ok {
		return base
	}
	if l.MaxTurns > 0 && (base.MaxTurns == 0 || l.MaxTurns < base.MaxTurns) {
		base.MaxTurns = l.MaxTurns
	}
	if l.MaxCost > 0 && (base.MaxCost == 0 || l.MaxCost < base.MaxCost) {
		base.MaxCost = l.MaxCost
	}
	return base
}

// RunLimitsFrom returns the run limits ctx carries.
func RunLimitsFrom(ctx context.Context) (RunLimits, bool) {
	l, ok := ctx.Value(runLimitsKey{}).(RunLimits)
	return l, ok
}
