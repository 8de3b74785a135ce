package serve

import (
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// An inbound message gets a span, and the session turn it starts runs
// under it (the kernel's turn span is its child); the message's text is
// not on the span.
func TestChannelMessageSpanParentsItsTurn(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	f := newFixture(t)
	f.ss.finished = make(chan string, 1)
	d := f.start(t, nil, Options{Tracer: telemetry.NewTracer(tp.Tracer("test"), false)}, &fakeChannel{name: "chat"})
	if _, err := d.Deliver(t.Context(), inbound("chat", "@me", "the secret plan 5521")); err != nil {
		t.Fatal(err)
	}
	recv(t, f.ss.finished)
	ended := sr.Ended()
	if len(ended) != 1 || ended[0].Name() != "fluffy.channel.message" {
		t.Fatalf("spans %v, want one fluffy.channel.message", ended)
	}
	msg := ended[0]
	f.ss.mu.Lock()
	got := f.ss.spans[0]
	f.ss.mu.Unlock()
	if got.SpanID() != msg.SpanContext().SpanID() || got.TraceID() != msg.SpanContext().TraceID() {
		t.Errorf("the turn ran under span %v, want the message's %v", got, msg.SpanContext())
	}
	for _, a := range msg.Attributes() {
		if strings.Contains(a.Value.Emit(), "5521") {
			t.Errorf("message text on the span: %s", a.Key)
		}
	}
}
