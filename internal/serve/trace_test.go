package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fluffy-agent/fluffy/internal/kernel"
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

// lockedBuffer is a log's output written from the daemon's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every log line of a traced message names its trace: the session it
// creates, the delivery, and the turn's fault when its reply goes out.
func TestLogLinesOfATracedMessageCarryItsTrace(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	var out lockedBuffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&out, nil)))
	f := newFixture(t)
	f.ss.fault = &kernel.Fault{Class: kernel.FaultRuntime, Message: "a fault for the log"}
	chat := &fakeChannel{name: "chat"}
	d := f.start(t, nil, Options{Tracer: telemetry.NewTracer(tp.Tracer("test"), false), Logger: log}, chat)
	id, err := d.Deliver(t.Context(), inbound("chat", "@me", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reply", func() bool { return len(chat.sentTexts()) == 1 })
	ended := sr.Ended()
	if len(ended) != 1 {
		t.Fatalf("spans %v, want the message's", ended)
	}
	want := ended[0].SpanContext().TraceID().String()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["session"] != id {
			continue
		}
		msg, _ := rec["msg"].(string)
		seen[msg] = true
		if rec["trace_id"] != want {
			t.Errorf("%q: trace_id %v, want %s", msg, rec["trace_id"], want)
		}
	}
	for _, msg := range []string{"session created", "message delivered", "session fault"} {
		if !seen[msg] {
			t.Errorf("no %q line for the session:\n%s", msg, out.String())
		}
	}
}
