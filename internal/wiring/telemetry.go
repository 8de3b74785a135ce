package wiring

import (
	"context"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/telemetry/otlp"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

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
