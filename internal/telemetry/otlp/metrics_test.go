package otlp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// metricsReceiver is a minimal OTLP/HTTP metrics receiver on the official
// protobuf types (uncompressed bodies: the exporter's default).
type metricsReceiver struct {
	mu   sync.Mutex
	reqs []*colmetricpb.ExportMetricsServiceRequest
}

func (rc *metricsReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Content-Encoding") != "" {
		http.Error(w, "not an uncompressed OTLP/HTTP protobuf metrics export", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := new(colmetricpb.ExportMetricsServiceRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, req)
	rc.mu.Unlock()
	out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// last returns the metrics of the newest export by name.
func (rc *metricsReceiver) last(t *testing.T) map[string]*metricpb.Metric {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("no metrics export arrived")
	}
	out := map[string]*metricpb.Metric{}
	for _, rm := range rc.reqs[len(rc.reqs)-1].ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				out[m.Name] = m
			}
		}
	}
	return out
}

// TestMetricsReachAnOTLPReceiver: the registry's counters, gauges (a
// gauge function too) and histograms arrive as OTLP sums, gauges and
// histograms with their labels, values and bucket counts, at Shutdown
// without waiting for the interval.
func TestMetricsReachAnOTLPReceiver(t *testing.T) {
	rc := &metricsReceiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	m := telemetry.NewMetrics()
	m.Add(telemetry.MetricToolCalls, 1, "outcome", "allow")
	m.Add(telemetry.MetricToolCalls, 1, "outcome", "allow")
	m.Add(telemetry.MetricToolCalls, 1, "outcome", "refused_policy")
	m.Add(telemetry.MetricTurnsRunning, 1)
	m.Observe(telemetry.MetricSandboxStart, 3*time.Millisecond, "runtime", "native", "start_mode", "direct")
	m.Observe(telemetry.MetricSandboxStart, 20*time.Second, "runtime", "native", "start_mode", "direct")
	m.GaugeFunc(telemetry.MetricInboxQueue, func() float64 { return 7 })

	_, exp, err := Start(t.Context(), Options{Endpoint: srv.URL, Metrics: m, MetricsInterval: time.Hour, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := rc.last(t)

	calls := got[telemetry.MetricToolCalls].GetSum()
	if calls == nil || !calls.IsMonotonic || calls.AggregationTemporality != metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
		t.Fatalf("%s: want a cumulative monotonic sum, got %v", telemetry.MetricToolCalls, got[telemetry.MetricToolCalls])
	}
	byOutcome := map[string]float64{}
	for _, dp := range calls.DataPoints {
		if len(dp.Attributes) != 1 || dp.Attributes[0].Key != "outcome" {
			t.Errorf("tool call point attributes: %v", dp.Attributes)
			continue
		}
		byOutcome[dp.Attributes[0].Value.GetStringValue()] = dp.GetAsDouble()
	}
	if byOutcome["allow"] != 2 || byOutcome["refused_policy"] != 1 || len(byOutcome) != 2 {
		t.Errorf("tool calls by outcome: %v", byOutcome)
	}
	if g := got[telemetry.MetricTurnsRunning].GetGauge(); g == nil || len(g.DataPoints) != 1 || g.DataPoints[0].GetAsDouble() != 1 {
		t.Errorf("%s: %v", telemetry.MetricTurnsRunning, got[telemetry.MetricTurnsRunning])
	}
	if g := got[telemetry.MetricInboxQueue].GetGauge(); g == nil || len(g.DataPoints) != 1 || g.DataPoints[0].GetAsDouble() != 7 {
		t.Errorf("%s (a gauge function): %v", telemetry.MetricInboxQueue, got[telemetry.MetricInboxQueue])
	}
	h := got[telemetry.MetricSandboxStart].GetHistogram()
	if h == nil || len(h.DataPoints) != 1 {
		t.Fatalf("%s: %v", telemetry.MetricSandboxStart, got[telemetry.MetricSandboxStart])
	}
	dp := h.DataPoints[0]
	bounds := telemetry.Buckets()
	if dp.Count != 2 || len(dp.ExplicitBounds) != len(bounds) || len(dp.BucketCounts) != len(bounds)+1 {
		t.Fatalf("histogram point: count %d, %d bounds, %d bucket counts", dp.Count, len(dp.ExplicitBounds), len(dp.BucketCounts))
	}
	// 3 ms falls in the bucket bounded by 5 ms; 20 s past the last bound.
	want := make([]uint64, len(bounds)+1)
	for i, b := range bounds {
		if b == 0.005 {
			want[i] = 1
		}
	}
	want[len(bounds)] = 1
	for i := range want {
		if dp.BucketCounts[i] != want[i] {
			t.Fatalf("bucket counts %v, want %v", dp.BucketCounts, want)
		}
	}
	if dp.GetSum() < 20 || dp.StartTimeUnixNano == 0 || dp.StartTimeUnixNano > dp.TimeUnixNano {
		t.Errorf("histogram point sum %v, start %d, time %d", dp.GetSum(), dp.StartTimeUnixNano, dp.TimeUnixNano)
	}
	if got[telemetry.MetricSandboxStart].Unit != "s" {
		t.Errorf("histogram unit %q", got[telemetry.MetricSandboxStart].Unit)
	}
}
