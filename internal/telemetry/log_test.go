package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// A line logged with a traced context carries the trace and span ids, in
// a group and with attributes added before; a line without one does not.
func TestLogHandlerAddsTheTraceID(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	tr := telemetry.NewTracer(tp.Tracer("test"), false)
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("subsystem", "kernel")
	ctx, span := tr.Start(context.Background(), "turn", trace.SpanKindInternal)
	log.InfoContext(ctx, "traced")
	span.End()
	log.Info("untraced")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var traced, untraced map[string]any
	if err := json.Unmarshal(lines[0], &traced); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lines[1], &untraced); err != nil {
		t.Fatal(err)
	}
	sc := trace.SpanContextFromContext(ctx)
	if traced["trace_id"] != sc.TraceID().String() || traced["span_id"] != sc.SpanID().String() || traced["subsystem"] != "kernel" {
		t.Errorf("traced line: %s", lines[0])
	}
	if _, ok := untraced["trace_id"]; ok {
		t.Errorf("untraced line has a trace id: %s", lines[1])
	}
}
