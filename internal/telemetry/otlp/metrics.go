package otlp

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// producer hands the periodic reader the registry's series as OTLP
// metric data: the registry stays the one place the daemon counts, and
// /metrics and the export always agree.
type producer struct {
	m *telemetry.Metrics
}

var _ sdkmetric.Producer = producer{}

// scope names the instrumentation that made the series.
var scope = instrumentation.Scope{Name: "github.com/fluffy-agent/fluffy"}

// Produce converts a Snapshot: counters to cumulative monotonic sums,
// gauges to gauges, histograms to cumulative explicit-bucket histograms
// with the registry's bounds.
func (p producer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	fams := p.m.Snapshot()
	if len(fams) == 0 {
		return nil, nil
	}
	start, now := p.m.Start(), time.Now()
	bounds := telemetry.Buckets()
	sm := metricdata.ScopeMetrics{Scope: scope}
	for _, f := range fams {
		out := metricdata.Metrics{Name: f.Name, Description: f.Help}
		switch f.Kind {
		case telemetry.KindCounter:
			out.Unit = "1"
			sum := metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
			for _, pt := range f.Points {
				sum.DataPoints = append(sum.DataPoints, metricdata.DataPoint[float64]{Attributes: attrs(pt.Labels), StartTime: start, Time: now, Value: pt.Value})
			}
			out.Data = sum
		case telemetry.KindGauge:
			out.Unit = "1"
			g := metricdata.Gauge[float64]{}
			for _, pt := range f.Points {
				g.DataPoints = append(g.DataPoints, metricdata.DataPoint[float64]{Attributes: attrs(pt.Labels), Time: now, Value: pt.Value})
			}
			out.Data = g
		case telemetry.KindHistogram:
			out.Unit = "s"
			h := metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality}
			for _, pt := range f.Points {
				h.DataPoints = append(h.DataPoints, metricdata.HistogramDataPoint[float64]{Attributes: attrs(pt.Labels),
					StartTime: start, Time: now, Count: pt.Count, Sum: pt.Sum, Bounds: bounds, BucketCounts: pt.Counts})
			}
			out.Data = h
		default:
			continue
		}
		sm.Metrics = append(sm.Metrics, out)
	}
	return []metricdata.ScopeMetrics{sm}, nil
}

// attrs turns name, value pairs into a set.
func attrs(kv []string) attribute.Set {
	if len(kv) == 0 {
		return *attribute.EmptySet()
	}
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(a...)
}
