package netproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// seqRecorder numbers the records as an audit log would, noting each
// number on the span of the context it was written with.
type seqRecorder struct {
	memRecorder
	mu sync.Mutex
	n  uint64
}

func (s *seqRecorder) RecordEgress(ctx context.Context, r Record) error {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if l, ok := telemetry.LinkFrom(ctx); ok {
		l.Produced(n)
	}
	return s.memRecorder.RecordEgress(ctx, r)
}

// Each request is a span under the call's: an allowed one from its
// decision to its end, carrying both its records; a refused one with its
// one record.
func TestRequestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := telemetry.NewTracer(tp.Tracer("test"), false)
	pctx, parent := tr.Start(t.Context(), "fluffy.tool.execution", trace.SpanKindInternal)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	rec := &seqRecorder{}
	e := startProxy(t, Options{Recorder: rec, Tracer: tr, TraceParent: trace.SpanContextFromContext(pctx)}, "127.0.0.1:"+port(t, up.URL))
	c := e.client(t, nil)
	resp, err := c.Get(up.URL + "/a")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = c.Get("http://refused.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec.wait(t, 2) // the allowed request's end and the refusal (its open record came first)
	parent.End()

	var reqs []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "fluffy.egress GET" {
			reqs = append(reqs, s)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d request spans, want 2", len(reqs))
	}
	want := map[string]int{"allow": 2, "deny": 1} // records per span
	for _, s := range reqs {
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			a[kv.Key] = kv.Value
		}
		d := a[telemetry.KeyDecision].AsString()
		if s.Parent().SpanID() != trace.SpanContextFromContext(pctx).SpanID() {
			t.Errorf("%s request: not a child of the call's span", d)
		}
		if n := len(a[telemetry.KeyAuditSeqs].AsInt64Slice()); n != want[d] {
			t.Errorf("%s request: %d audit seqs, want %d (%v)", d, n, want[d], a)
		}
		if d == "allow" && a["http.response.status_code"].AsInt64() != 200 {
			t.Errorf("allowed request: %v", a)
		}
	}
}
