package router_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// A command a person approves: the tool span has the state, policy and
// approval gates and the execution as children, the sandbox's span under
// the execution with the runtime and the start mode the run took, and
// the approval gate's span carries the approval's own audit entries.
func TestTraceOfAnApprovedCommand(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	metrics := telemetry.NewMetrics()
	e := newEnv(t, setup{approver: true, sandbox: true, hook: func(o *router.Options) {
		o.Tracer = telemetry.NewTracer(tp.Tracer("test"), false)
		o.RuntimeName = "native"
		o.Metrics = metrics
	}})
	e.mu.Lock()
	e.answer = "/approve"
	e.mu.Unlock()
	res, err := e.r.Call(t.Context(), tc("shell.exec", map[string]any{"command": "ls -la"}))
	must(t, err)
	if res.IsError {
		t.Fatalf("result: %s", res.Content)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		spans[s.Name()] = s
	}
	get := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no span %q among %v", name, spans)
		}
		return s
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes() {
			m[a.Key] = a.Value
		}
		return m
	}
	tool := get("execute_tool shell.exec")
	for _, name := range []string{"fluffy.gate.state", "fluffy.gate.policy", "fluffy.gate.approval", "fluffy.tool.execution"} {
		if s := get(name); s.Parent().SpanID() != tool.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the tool span", name)
		}
	}
	box := get("fluffy.sandbox.run")
	if box.Parent().SpanID() != get("fluffy.tool.execution").SpanContext().SpanID() {
		t.Error("the sandbox span is not a child of the execution span")
	}
	a := attrs(box)
	if a[telemetry.KeyStartMode].AsString() == "" || a[telemetry.KeyRuntime].AsString() == "" || a[telemetry.KeyExitCode].AsInt64() != 0 {
		t.Errorf("sandbox span attributes: %v", a)
	}
	ap := attrs(get("fluffy.gate.approval"))
	if ap[telemetry.KeyDecision].AsString() != "approved" || len(ap[telemetry.KeyAuditSeqs].AsInt64Slice()) == 0 {
		t.Errorf("approval span attributes: %v", ap)
	}
	if pol := attrs(get("fluffy.gate.policy")); pol[telemetry.KeyDecision].AsString() != "approve" || pol[telemetry.KeyRule].AsString() == "" {
		t.Errorf("policy span attributes: %v", pol)
	}

	// The same call, counted.
	var b strings.Builder
	must(t, metrics.WritePrometheus(&b))
	for _, want := range []string{`fluffy_tool_calls_total{outcome="approve"} 1`, "fluffy_approvals_waiting 0",
		`fluffy_sandbox_start_seconds_count{runtime="native",start_mode="` + a[telemetry.KeyStartMode].AsString() + `"} 1`} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	if !strings.Contains(b.String(), "fluffy_audit_append_seconds_count ") {
		t.Errorf("no audit append latency:\n%s", b.String())
	}
}
