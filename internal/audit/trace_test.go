package audit

import (
	"bytes"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// An entry appended under a traced context records the trace id, the span
// carries the entry's sequence number, the log still verifies, and the
// reader finds the entries by trace.
func TestTraceLink(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := telemetry.NewTracer(tp.Tracer("test"), false)
	l, opts := testLog(t, Options{})

	appendN(t, l, 1, "test.untraced")
	ctx, span := tr.Start(t.Context(), "turn", trace.SpanKindInternal)
	var seqs []int64
	for range 2 {
		seq, err := l.Append(ctx, Entry{Session: "s1", Kind: "test.traced", Actor: "agent"})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, int64(seq))
	}
	span.End()
	appendN(t, l, 1, "test.untraced")
	if err := l.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := telemetry.TraceIDFrom(ctx)

	ended := sr.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	var got []int64
	for _, a := range ended[0].Attributes() {
		if a.Key == telemetry.KeyAuditSeqs {
			got = a.Value.AsInt64Slice()
		}
	}
	if !slices.Equal(got, seqs) {
		t.Errorf("span %s = %v, want %v", telemetry.KeyAuditSeqs, got, seqs)
	}

	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var found []int64
	if err := r.Entries(t.Context(), Filter{Trace: id}, func(e Entry) error {
		if e.Trace != id {
			t.Errorf("entry %d: trace %q, want %q", e.Seq, e.Trace, id)
		}
		found = append(found, int64(e.Seq))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(found, seqs) {
		t.Errorf("entries of trace %s = %v, want %v", id, found, seqs)
	}
	if rep, err := verifyDB(t, opts, true); err != nil {
		t.Fatalf("verify: %v (%+v)", err, rep)
	}
}

// An entry without a trace encodes exactly as the six-member form; one
// with a trace round-trips through ParseEntry; malformed ids are refused.
func TestEntryTraceEncoding(t *testing.T) {
	tm := time.Date(2026, 11, 22, 0, 2, 3, 4, time.UTC)
	e := Entry{Seq: 42, Time: tm, Kind: "user.note", Actor: "user"}
	plain, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"actor":"user","kind":"user.note","payload":{},"seq":42,"session":"","time":"2026-11-22T00:02:03.000000004Z"}`; string(plain) != want {
		t.Errorf("untraced entry = %s, want %s", plain, want)
	}
	e.Trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, []byte(`"time":"2026-11-22T00:02:03.000000004Z","trace":"4bf92f3577b34da6a3ce929d0e0e4736"}`)) {
		t.Errorf("traced entry = %s", b)
	}
	back, err := ParseEntry(b)
	if err != nil || back.Trace != e.Trace {
		t.Fatalf("ParseEntry: %+v, %v", back, err)
	}
	for _, bad := range []string{"4BF92F3577B34DA6A3CE929D0E0E4736", "00000000000000000000000000000000", "4bf9", `4bf92f3577b34da6a3ce929d0e0e473"`} {
		e.Trace = bad
		if _, err := e.Encode(); err == nil {
			t.Errorf("trace %q encoded", bad)
		}
	}
	if _, err := ParseEntry([]byte(`{"actor":"user","kind":"user.note","payload":{},"seq":42,"session":"","time":"2026-11-22T00:02:03.000000004Z","trace":""}`)); err == nil {
		t.Error("an empty trace member parsed (it is never written)")
	}
}
