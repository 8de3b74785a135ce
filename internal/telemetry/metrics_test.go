package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// The exposition: HELP and TYPE per series, labels sorted and escaped,
// cumulative histogram buckets with +Inf, _sum and _count; a nil
// registry counts nothing and does not panic.
func TestPrometheusExposition(t *testing.T) {
	var none *telemetry.Metrics
	none.Add(telemetry.MetricToolCalls, 1, "outcome", "allow")
	none.Observe(telemetry.MetricAuditAppend, time.Millisecond)

	m := telemetry.NewMetrics()
	m.Add(telemetry.MetricToolCalls, 1, "outcome", "allow")
	m.Add(telemetry.MetricToolCalls, 2, "outcome", "allow")
	m.Add(telemetry.MetricToolCalls, 1, "outcome", `say "no"`)
	m.Add(telemetry.MetricApprovalsWait, 1)
	m.Add(telemetry.MetricApprovalsWait, -1)
	m.Observe(telemetry.MetricSandboxStart, 3*time.Millisecond, "start_mode", "direct", "runtime", "native")
	m.Observe(telemetry.MetricSandboxStart, 20*time.Second, "start_mode", "direct", "runtime", "native")
	m.GaugeFunc(telemetry.MetricInboxQueue, func() float64 { return 4 })
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"# TYPE fluffy_tool_calls_total counter\n",
		`fluffy_tool_calls_total{outcome="allow"} 3` + "\n",
		`fluffy_tool_calls_total{outcome="say \"no\""} 1` + "\n",
		"# TYPE fluffy_approvals_waiting gauge\nfluffy_approvals_waiting 0\n",
		"# TYPE fluffy_sandbox_start_seconds histogram\n",
		`fluffy_sandbox_start_seconds_bucket{runtime="native",start_mode="direct",le="0.0025"} 0` + "\n",
		`fluffy_sandbox_start_seconds_bucket{runtime="native",start_mode="direct",le="0.005"} 1` + "\n",
		`fluffy_sandbox_start_seconds_bucket{runtime="native",start_mode="direct",le="10"} 1` + "\n",
		`fluffy_sandbox_start_seconds_bucket{runtime="native",start_mode="direct",le="+Inf"} 2` + "\n",
		`fluffy_sandbox_start_seconds_sum{runtime="native",start_mode="direct"} 20.003` + "\n",
		`fluffy_sandbox_start_seconds_count{runtime="native",start_mode="direct"} 2` + "\n",
		"# TYPE fluffy_serve_queued_messages gauge\nfluffy_serve_queued_messages 4\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("exposition lacks %q:\n%s", want, got)
		}
	}
}
