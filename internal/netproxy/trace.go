package netproxy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// traceRecord returns the context r is written with and what to call once
// it is. An allowed request's span opens with its PhaseOpen record and
// ends with its PhaseEnd record; a refusal's span holds its one record.
// Without a Tracer it does nothing.
func (p *Proxy) traceRecord(ctx context.Context, r Record) (context.Context, func()) {
	if p.opts.Tracer == nil {
		return ctx, func() {}
	}
	if r.Phase == PhaseEnd {
		p.mu.Lock()
		o, ok := p.spans[r.ID]
		delete(p.spans, r.ID)
		p.mu.Unlock()
		if !ok {
			return ctx, func() {}
		}
		return o.ctx, func() { endRequestSpan(o.span, r) }
	}
	sctx, span := p.opts.Tracer.Start(ctx, "fluffy.egress "+r.Method, trace.SpanKindClient,
		attribute.String("http.request.method", r.Method), telemetry.KeyDestination.String(r.Host), attribute.Int("server.port", r.Port),
		telemetry.KeyDecision.String(string(r.Decision)), telemetry.KeyRule.String(r.Rule), telemetry.KeySession.String(r.Session))
	if r.Decision != Allowed {
		return sctx, func() { endRequestSpan(span, r) }
	}
	p.mu.Lock()
	if p.spans == nil {
		p.spans = map[string]openSpan{}
	}
	p.spans[r.ID] = openSpan{ctx: sctx, span: span}
	p.mu.Unlock()
	return sctx, func() {}
}

func endRequestSpan(span telemetry.Span, r Record) {
	if span.Recording() {
		span.Set(attribute.Int("http.response.status_code", r.Status), attribute.Int64("fluffy.egress.bytes_up", r.BytesUp),
			attribute.Int64("fluffy.egress.bytes_down", r.BytesDown))
		if r.Err != "" {
			span.Set(attribute.String("error.type", r.Err))
		}
	}
	span.End()
}
