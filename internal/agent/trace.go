package agent

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// modelSpan starts the span of one model call, named and attributed by
// the GenAI semantic conventions. Message text goes on it only when the
// tracer includes content (telemetry.include_content).
func (a *Agent) modelSpan(ctx context.Context, req llm.Request, turn int) (context.Context, telemetry.Span) {
	t := a.o.Tracer
	if t == nil {
		return ctx, telemetry.Span{}
	}
	ctx, span := t.Start(ctx, "chat "+req.Model, trace.SpanKindClient,
		telemetry.KeyGenAIOperation.String("chat"),
		telemetry.KeyGenAISystem.String(a.o.ProviderName),
		telemetry.KeyGenAIRequestModel.String(req.Model),
		telemetry.KeyTurn.Int(turn))
	if span.Recording() {
		if req.MaxTokens > 0 {
			span.Set(telemetry.KeyGenAIMaxTokens.Int(req.MaxTokens))
		}
		if t.IncludeContent() {
			if b, err := json.Marshal(req.Messages); err == nil {
				span.Set(telemetry.KeyGenAIInput.String(string(b)))
			}
		}
	}
	return ctx, span
}

// modelSpanEnd sets what the response says: token usage (input counts the
// cached tokens too, as the conventions define it) and the stop reason.
func (a *Agent) modelSpanEnd(span telemetry.Span, resp llm.Response) {
	if !span.Recording() {
		return
	}
	u := resp.Usage
	span.Set(telemetry.KeyGenAIInputTokens.Int(u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens),
		telemetry.KeyGenAIOutputTokens.Int(u.OutputTokens),
		attribute.Int("gen_ai.usage.cache_read.input_tokens", u.CacheReadTokens),
		attribute.Int("gen_ai.usage.cache_creation.input_tokens", u.CacheWriteTokens),
		telemetry.KeyGenAIFinish.StringSlice([]string{string(resp.Stop)}))
	if a.o.Tracer.IncludeContent() {
		if b, err := json.Marshal(resp.Message); err == nil {
			span.Set(telemetry.KeyGenAIOutput.String(string(b)))
		}
	}
}
