package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Under a traced call, a container's lifecycle is three spans, children
// of the caller's span: create, start and stop, for a one-off run and
// for a pool's container started on demand alike. Untraced, none.
func TestContainerSpans(t *testing.T) {
	rt := engine(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	spec := sandbox.Spec{Argv: []string{"true"}, Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 10 * time.Second, Pids: 64}}

	if _, err := rt.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an untraced run made %d spans", n)
	}

	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, tc := range []struct {
		name string
		rt   sandbox.Runtime
	}{{"run", rt}, {"pool", p}} {
		ctx, parent := tp.Tracer("test").Start(context.Background(), "execute_tool "+tc.name)
		if _, err := tc.rt.Run(ctx, spec); err != nil {
			t.Fatal(err)
		}
		parent.End()
		var names []string
		id := ""
		for _, s := range rec.Ended() {
			// The engine client's HTTP spans are its own (otelhttp).
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || !strings.HasPrefix(s.Name(), "fluffy.") {
				continue
			}
			names = append(names, s.Name())
			for _, a := range s.Attributes() {
				switch {
				case a.Key == telemetry.KeyRuntime && a.Value.AsString() != "docker" && a.Value.AsString() != "podman":
					t.Errorf("%s: %s = %q", s.Name(), a.Key, a.Value.AsString())
				case a.Key == telemetry.KeyContainerID && id == "":
					id = a.Value.AsString()
				case a.Key == telemetry.KeyContainerID && a.Value.AsString() != id:
					t.Errorf("%s: container %s, the create span's %s", s.Name(), a.Value.AsString(), id)
				}
			}
		}
		want := []string{telemetry.SpanContainerCreate, telemetry.SpanContainerStart, telemetry.SpanContainerStop}
		if len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] || id == "" {
			t.Errorf("%s: children of the caller's span %v (container %q), want %v", tc.name, names, id, want)
		}
	}
}
