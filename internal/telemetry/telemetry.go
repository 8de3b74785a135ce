// Package telemetry owns fluffy's traces: the Tracer every traced part
// takes (a nil *Tracer traces nothing and costs a nil check), the span
// names and attribute keys the docs list (docs/observability.md), and the
// link from a span to the audit entries written under it: an entry
// appended with a traced context records the trace id, and the span
// carries the entry's sequence number in fluffy.audit.seqs when it ends.
//
// It depends on the OpenTelemetry API only; the SDK and the OTLP
// exporters are set up by internal/telemetry/otlp.
package telemetry

import (
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys fluffy sets besides the GenAI semantic conventions.
const (
	KeyAuditSeqs   = attribute.Key("fluffy.audit.seqs")
	KeySession     = attribute.Key("fluffy.session.id")
	KeyTurn        = attribute.Key("fluffy.turn")
	KeyGate        = attribute.Key("fluffy.gate")
	KeyDecision    = attribute.Key("fluffy.decision")
	KeyRule        = attribute.Key("fluffy.rule")
	KeyReason      = attribute.Key("fluffy.reason")
	KeyToolClass   = attribute.Key("fluffy.tool.class")
	KeyRuntime     = attribute.Key("fluffy.sandbox.runtime")
	KeyStartMode   = attribute.Key("fluffy.sandbox.start_mode")
	KeyTemplate    = attribute.Key("fluffy.sandbox.template")
	KeyExitCode    = attribute.Key("process.exit.code")
	KeyChannel     = attribute.Key("fluffy.channel")
	KeyApprovalID  = attribute.Key("fluffy.approval.id")
	KeyDestination = attribute.Key("server.address")
	KeyContainerID = attribute.Key("container.id")
)

// Names of the spans that parts without a Tracer of their own start with
// StartChild.
const (
	SpanClassify        = "fluffy.policy.classify"
	SpanContainerCreate = "fluffy.container.create"
	SpanContainerStart  = "fluffy.container.start"
	SpanContainerStop   = "fluffy.container.stop"
)

// scopeName is the instrumentation scope of fluffy's spans.
const scopeName = "github.com/fluffy-agent/fluffy"

// GenAI semantic convention keys (gen_ai.*) for model and tool spans.
const (
	KeyGenAIOperation    = attribute.Key("gen_ai.operation.name")
	KeyGenAISystem       = attribute.Key("gen_ai.provider.name")
	KeyGenAIRequestModel = attribute.Key("gen_ai.request.model")
	KeyGenAIMaxTokens    = attribute.Key("gen_ai.request.max_tokens")
	KeyGenAIInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	KeyGenAIOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	KeyGenAIFinish       = attribute.Key("gen_ai.response.finish_reasons")
	KeyGenAIToolName     = attribute.Key("gen_ai.tool.name")
	KeyGenAIToolCallID   = attribute.Key("gen_ai.tool.call.id")
	KeyGenAIInput        = attribute.Key("gen_ai.input.messages")
	KeyGenAIOutput       = attribute.Key("gen_ai.output.messages")
)

// Tracer starts fluffy's spans. The nil *Tracer is valid and traces
// nothing: every traced part takes one, and tracing off is the nil
// Tracer, so no span, context value or attribute is made.
type Tracer struct {
	t       trace.Tracer
	content bool
}

// NewTracer wraps t. includeContent lets model spans carry the prompt and
// the response text (telemetry.include_content); without it no message
// text is ever set on a span.
func NewTracer(t trace.Tracer, includeContent bool) *Tracer {
	if t == nil {
		return nil
	}
	return &Tracer{t: t, content: includeContent}
}

// IncludeContent reports whether spans may carry message text.
func (t *Tracer) IncludeContent() bool { return t != nil && t.content }

// Span is one started span. The zero Span (from a nil Tracer) does
// nothing.
type Span struct {
	s   trace.Span
	rec *recorder
}

// recorder collects the audit sequence numbers written under one span.
type recorder struct {
	trace string
	mu    sync.Mutex
	seqs  []int64
}

type recorderKey struct{}

// Start starts a span named name as a child of ctx's span, and returns
// the context that carries it (audit entries appended with that context
// are linked to it).
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	if !s.IsRecording() {
		return ctx, Span{s: s}
	}
	rec := &recorder{trace: s.SpanContext().TraceID().String()}
	return context.WithValue(ctx, recorderKey{}, rec), Span{s: s, rec: rec}
}

// StartChild starts a span named name as a child of ctx's span when ctx
// carries a recording one, with that span's tracer provider; otherwise it
// returns ctx and the zero Span. It is for parts only ever reached under
// a traced call (the policy's classifier, the container engine's
// lifecycle) that take no Tracer of their own: untraced, they pay one
// context lookup.
func StartChild(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, Span{}
	}
	t := Tracer{t: parent.TracerProvider().Tracer(scopeName)}
	return t.Start(ctx, name, kind, attrs...)
}

// Recording reports whether attributes set on s are kept: callers skip
// building costly attributes when it is false.
func (s Span) Recording() bool { return s.s != nil && s.s.IsRecording() }

// Set sets attributes on s.
func (s Span) Set(attrs ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(attrs...)
	}
}

// Fail marks s as failed with err (nil: no change).
func (s Span) Fail(err error) {
	if s.s != nil && err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
}

// End ends s, first setting fluffy.audit.seqs to the sequence numbers of
// the audit entries appended under it. Ending twice is harmless.
func (s Span) End() {
	if s.s == nil {
		return
	}
	if s.rec != nil {
		s.rec.mu.Lock()
		seqs := slices.Clone(s.rec.seqs)
		s.rec.mu.Unlock()
		if len(seqs) > 0 {
			s.s.SetAttributes(KeyAuditSeqs.Int64Slice(seqs))
		}
	}
	s.s.End()
}

// Link is what the audit log needs of a traced context: the trace id to
// record in an entry, and where to note the entry's sequence number.
type Link struct{ rec *recorder }

// LinkFrom returns ctx's link to its innermost fluffy span, and false
// when ctx is not traced.
func LinkFrom(ctx context.Context) (Link, bool) {
	rec, _ := ctx.Value(recorderKey{}).(*recorder)
	return Link{rec}, rec != nil
}

// TraceID is the trace's id in hex (32 characters).
func (l Link) TraceID() string { return l.rec.trace }

// Produced notes that the entry seq was written under the span.
func (l Link) Produced(seq uint64) {
	l.rec.mu.Lock()
	l.rec.seqs = append(l.rec.seqs, int64(seq))
	l.rec.mu.Unlock()
}

// TraceIDFrom returns the id of ctx's trace, "" when it has none: the
// value the log handler adds to each line (trace_id).
func TraceIDFrom(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
