package router

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// toolSpan starts a call's span. The name is the model's only when it
// names a registered tool: the model's text never names a span.
func (r *Router) toolSpan(ctx context.Context, c llm.ToolCall) (context.Context, telemetry.Span) {
	if r.o.Tracer == nil {
		return ctx, telemetry.Span{}
	}
	name := "execute_tool"
	if t, err := r.o.Registry.Lookup(c.Name); err == nil {
		name += " " + t.Name()
		ctx, span := r.o.Tracer.Start(ctx, name, trace.SpanKindInternal, telemetry.KeyGenAIOperation.String("execute_tool"),
			telemetry.KeyGenAIToolName.String(t.Name()), telemetry.KeyGenAIToolCallID.String(c.ID), telemetry.KeySession.String(r.o.Session.ID))
		return ctx, span
	}
	return r.o.Tracer.Start(ctx, name, trace.SpanKindInternal, telemetry.KeyGenAIOperation.String("execute_tool"),
		telemetry.KeySession.String(r.o.Session.ID))
}

// executionSpan starts the span of a call's execution.
func (r *Router) executionSpan(ctx context.Context, t *tool.Tool) (context.Context, telemetry.Span) {
	if r.o.Tracer == nil {
		return ctx, telemetry.Span{}
	}
	return r.o.Tracer.Start(ctx, "fluffy.tool.execution", trace.SpanKindInternal, telemetry.KeyToolClass.String(string(t.Execution().Class)))
}

// sandboxSpan starts the span of a command's sandbox: its build, the
// command and its teardown.
func (r *Router) sandboxSpan(ctx context.Context, t *tool.Tool) (context.Context, telemetry.Span) {
	if r.o.Tracer == nil {
		return ctx, telemetry.Span{}
	}
	return r.o.Tracer.Start(ctx, "fluffy.sandbox.run", trace.SpanKindInternal, telemetry.KeyRuntime.String(r.o.RuntimeName),
		telemetry.KeyTemplate.String(t.Execution().Template))
}

// sandboxSpanEnd sets what the run says: the start mode, the setup time
// and the exit code.
func sandboxSpanEnd(span telemetry.Span, res *sandbox.Result) {
	if !span.Recording() {
		return
	}
	span.Set(telemetry.KeyStartMode.String(res.StartMode), telemetry.KeyExitCode.Int(res.ExitCode),
		attribute.Int64("fluffy.sandbox.setup_us", res.Setup.Microseconds()))
}

// askTraced is ask in the approval gate's span, which covers the wait for
// the person and carries the approval's own entries.
func (r *Router) askTraced(ctx context.Context, cl *call, shown string) (Refusal, bool, error) {
	r.o.Metrics.Add(telemetry.MetricApprovalsWait, 1)
	defer r.o.Metrics.Add(telemetry.MetricApprovalsWait, -1)
	if r.o.Tracer == nil {
		return r.ask(ctx, cl, shown)
	}
	ctx, span := r.o.Tracer.Start(ctx, "fluffy.gate.approval", trace.SpanKindInternal, telemetry.KeyGate.String("approval"), telemetry.KeyRule.String(cl.pd.Rule))
	defer span.End()
	ref, ok, err := r.ask(ctx, cl, shown)
	switch {
	case err != nil:
		span.Fail(err)
	case ok:
		span.Set(telemetry.KeyDecision.String("approved"))
	default:
		span.Set(telemetry.KeyDecision.String("refused"))
	}
	return ref, ok, err
}

// outcome is a call's label in fluffy_tool_calls_total: the policy's
// effect for a call that ran (allow, approve), the refusing gate
// (refused_state, refused_policy, ...), or runtime.
func outcome(decision string, err error) string {
	switch {
	case err != nil:
		return "runtime"
	case strings.HasPrefix(decision, "refused by the "):
		gate, _, _ := strings.Cut(strings.TrimPrefix(decision, "refused by the "), " ")
		return "refused_" + gate
	}
	effect, _, _ := strings.Cut(decision, ":")
	return effect
}

func allowString(ok bool) string {
	if ok {
		return "allow"
	}
	return "refuse"
}
