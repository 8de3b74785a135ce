package wiring

import (
	"context"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/telemetry/otlp"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// kernelMetrics is the kernel's one registry, which serves /metrics and
// the OTLP export alike: nil when neither is configured. Beside what the
// sessions count, it reads the queues between a session and the disk at
// each scrape: the audit log's unwritten entries, the scheduler's waiting
// tasks.
func kernelMetrics(c config.Telemetry, al *audit.Shared, s *sched.Scheduler) *telemetry.Metrics {
	if !c.Prometheus && c.OTLPEndpoint == "" {
		return nil
	}
	m := telemetry.NewMetrics()
	m.GaugeFunc(telemetry.MetricAuditQueue, func() float64 { return float64(al.Pending()) })
	m.GaugeFunc(telemetry.MetricSchedQueue, func() float64 {
		if s == nil {
			return 0
		}
		n := 0
		for _, q := range s.Status().Queued {
			n += q
		}
		return float64(n)
	})
	return m
}

// startTelemetry starts the OTLP export telemetry.otlp_endpoint names: the
// traces and, when metrics is not nil, the metrics every
// telemetry.metrics_interval. Without an endpoint it returns the nil
// Tracer and Exporter (tracing off, nothing exported).
func startTelemetry(ctx context.Context, u *userenv.Env, c config.Telemetry, metrics *telemetry.Metrics) (*telemetry.Tracer, *otlp.Exporter, error) {
	if c.OTLPEndpoint == "" {
		return nil, nil, nil
	}
	o := otlp.Options{Endpoint: c.OTLPEndpoint, Protocol: c.OTLPProtocol, IncludeContent: c.IncludeContent, Version: buildinfo.Get().Version,
		Metrics: metrics, MetricsInterval: c.MetricsInterval.Std()}
	if c.HeadersEnv != "" {
		v, ok := u.Getenv(c.HeadersEnv)
		if !ok {
			return nil, nil, fmt.Errorf("%w: telemetry.headers_env: %s is not set", userenv.ErrUsage, c.HeadersEnv)
		}
		h, err := otlp.ParseHeaders(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", userenv.ErrUsage, c.HeadersEnv, err)
		}
		o.Headers = h
	}
	tr, exp, err := otlp.Start(ctx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", userenv.ErrUsage, err)
	}
	u.Logger().Info("traces and metrics exported", "endpoint", c.OTLPEndpoint, "protocol", c.OTLPProtocol, "include_content", c.IncludeContent, "metrics_interval", c.MetricsInterval.Std())
	return tr, exp, nil
}
