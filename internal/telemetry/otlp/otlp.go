// Package otlp owns the export of fluffy's traces and metrics: the
// OpenTelemetry SDK's tracer provider with a batching OTLP exporter, and a
// meter provider whose periodic reader exports the daemon's
// telemetry.Metrics, over HTTP or gRPC to the collector
// telemetry.otlp_endpoint names. It is set up once per daemon and hands
// the traced parts an *telemetry.Tracer.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// ErrConfig wraps an unusable export configuration.
var ErrConfig = errors.New("telemetry configuration")

// Options configure the export.
type Options struct {
	// Endpoint is the collector's URL; empty disables tracing (Start
	// returns the nil Tracer).
	Endpoint string
	// Protocol is "http" (the default) or "grpc".
	Protocol string
	// Headers go with every export request.
	Headers map[string]string
	// IncludeContent lets model spans carry message text.
	IncludeContent bool
	// Version is fluffy's version, the resource's service.version.
	Version string
	// Metrics, when not nil, are exported every MetricsInterval
	// (default DefaultMetricsInterval) and once more at Shutdown.
	Metrics         *telemetry.Metrics
	MetricsInterval time.Duration
}

// DefaultMetricsInterval is how often metrics are exported by default.
const DefaultMetricsInterval = time.Minute

// Exporter is a started export; Shutdown sends what is buffered.
type Exporter struct {
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider // nil: no metrics exported
}

// Start builds the exporter and the tracer. With no endpoint it returns
// the nil Tracer and a nil *Exporter (whose Shutdown does nothing). The
// exporter connects lazily: a collector that is down costs dropped spans,
// never a failed session.
func Start(ctx context.Context, o Options) (*telemetry.Tracer, *Exporter, error) {
	if o.Endpoint == "" {
		return nil, nil, nil
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("%w: telemetry.otlp_endpoint %q: want http://host:port or https://host:port", ErrConfig, o.Endpoint)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "fluffy"), attribute.String("service.version", o.Version))
	var client otlptrace.Client
	switch o.Protocol {
	case "", "http":
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpointURL(u, "/v1/traces"))}
		if len(o.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(o.Headers))
		}
		client = otlptracehttp.NewClient(opts...)
	case "grpc":
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(u.String())}
		if len(o.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(o.Headers))
		}
		client = otlptracegrpc.NewClient(opts...)
	default:
		return nil, nil, fmt.Errorf("%w: telemetry.otlp_protocol %q: want http or grpc", ErrConfig, o.Protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	e := &Exporter{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}
	if o.Metrics != nil {
		if e.mp, err = startMetrics(ctx, u, o, res); err != nil {
			_ = e.tp.Shutdown(ctx)
			return nil, nil, err
		}
	}
	return telemetry.NewTracer(e.tp.Tracer("github.com/fluffy-agent/fluffy"), o.IncludeContent), e, nil
}

// startMetrics starts the periodic export of o.Metrics to u over
// o.Protocol (already checked by Start).
func startMetrics(ctx context.Context, u *url.URL, o Options, res *resource.Resource) (*sdkmetric.MeterProvider, error) {
	var exp sdkmetric.Exporter
	var err error
	if o.Protocol == "grpc" {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(u.String())}
		if len(o.Headers) > 0 {
			opts = append(opts, otlpmetricgrpc.WithHeaders(o.Headers))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(endpointURL(u, "/v1/metrics"))}
		if len(o.Headers) > 0 {
			opts = append(opts, otlpmetrichttp.WithHeaders(o.Headers))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
	}
	every := o.MetricsInterval
	if every <= 0 {
		every = DefaultMetricsInterval
	}
	r := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(every), sdkmetric.WithProducer(producer{o.Metrics}))
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithResource(res)), nil
}

// endpointURL is u with path p when u names no path of its own.
func endpointURL(u *url.URL, p string) string {
	v := *u
	if v.Path == "" || v.Path == "/" {
		v.Path = p
	}
	return v.String()
}

// Flush exports every ended span, and the metrics, now.
func (e *Exporter) Flush(ctx context.Context) error {
	if e == nil {
		return nil
	}
	err := e.tp.ForceFlush(ctx)
	if e.mp != nil {
		err = errors.Join(err, e.mp.ForceFlush(ctx))
	}
	return err
}

// Shutdown exports what is buffered (the spans, the metrics once more)
// and stops the exporter.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e == nil {
		return nil
	}
	err := e.tp.Shutdown(ctx)
	if e.mp != nil {
		err = errors.Join(err, e.mp.Shutdown(ctx))
	}
	return err
}

// ParseHeaders reads key=value,key=value (the form of
// OTEL_EXPORTER_OTLP_HEADERS).
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%w: header %q: want key=value", ErrConfig, kv)
		}
		if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			v = dv
		}
		h[strings.TrimSpace(k)] = v
	}
	return h, nil
}
