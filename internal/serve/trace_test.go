package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
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
		if strings.Contains(a.Value.String(), "5521") {
			t.Errorf("message text on the span: %s", a.Key)
		}
	}
}

// /metrics on the health listener, scraped: the inbound message is
// counted by channel and the queue length is read at the scrape; without
// Metrics, or with them kept for the OTLP export alone
// (NoMetricsEndpoint), there is no /metrics.
func TestMetricsScrape(t *testing.T) {
	f := newFixture(t)
	f.ss.finished = make(chan string, 1)
	d := f.start(t, nil, Options{Metrics: telemetry.NewMetrics()}, &fakeChannel{name: "chat"})
	if _, err := d.Deliver(t.Context(), inbound("chat", "@me", "hello")); err != nil {
		t.Fatal(err)
	}
	recv(t, f.ss.finished)
	srv := httptest.NewServer(d.HealthHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`fluffy_channel_messages_total{channel="chat"} 1`, "fluffy_serve_queued_messages 0"} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("scrape lacks %q:\n%s", want, b)
		}
	}

	for _, o := range []Options{{}, {Metrics: telemetry.NewMetrics(), NoMetricsEndpoint: true}} {
		plain := httptest.NewServer(f.start(t, nil, o, &fakeChannel{name: "chat"}).HealthHandler())
		resp, err = http.Get(plain.URL + "/metrics")
		plain.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /metrics without telemetry.prometheus (metrics %v): %d, want 404", o.Metrics != nil, resp.StatusCode)
		}
	}
}
