package router_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// benchWarmup calls run before the timed loop: caches, the policy
// engine's per-tool index, the first SQLite pages and the heap reach
// their steady state.
const benchWarmup = 500

// BenchmarkFastPath measures the router's own overhead on the fast path:
// lookup, strict decoding and schema validation, path normalization
// through the change set, the TDD gate (the real machine and journal),
// the policy engine (the embedded default rules, the built-ins and a
// user file of 38 rules: testdata/bench_policy.yaml), sanitizing and the
// buffered audit append (the real log, whose background writer runs
// during the timing). The tool's own work is excluded (it returns a
// constant).
//
// Every call is timed on its own, after benchWarmup untimed calls; the
// percentiles are of those b.N samples (use -benchtime 5000x or more:
// p99 of 5,000 samples is the 50th slowest). cpu-ns/op is the process's
// CPU time per call, background writer included; gc/1k-calls the
// garbage collections per thousand calls (each one slows the calls it
// overlaps: what sets the tail once the pipeline itself is fast).
func BenchmarkFastPath(b *testing.B) {
	r, c := fastPathEnv(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc0 := ms.NumGC
	cpu0 := cpuTime()
	for range b.N {
		t0 := time.Now()
		res, err := r.Call(ctx, c)
		lat = append(lat, time.Since(t0))
		if err != nil || res.IsError {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.NumGC-gc0)*1000/float64(b.N), "gc/1k-calls")
	reportPercentiles(b, lat, "")
}

// BenchmarkFastPathOnCPU is BenchmarkFastPath timed in the calling
// thread's CPU time (the goroutine locked to its thread,
// CLOCK_THREAD_CPUTIME_ID around each call): what each call costs on
// the CPU, its own work plus any GC assist, without the time the thread
// waits for a core. On a loaded machine the wall-clock tail mostly
// measures the neighbours; this one does not (a call waiting for a lock
// would show only in the wall-clock figures).
func BenchmarkFastPathOnCPU(b *testing.B) {
	r, c := fastPathEnv(b)
	ctx := context.Background()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := threadTime()
		res, err := r.Call(ctx, c)
		lat = append(lat, threadTime()-t0)
		if err != nil || res.IsError {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	reportPercentiles(b, lat, "cpu-")
}

func reportPercentiles(b *testing.B, lat []time.Duration, prefix string) {
	slices.Sort(lat)
	b.ReportMetric(float64(percentile(lat, 50).Microseconds()), prefix+"p50-µs")
	b.ReportMetric(float64(percentile(lat, 99).Microseconds()), prefix+"p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), prefix+"max-µs")
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// sample with at least p % of the samples at or below it (the 4,950th of
// 5,000 for p99, index 4,949).
func percentile(sorted []time.Duration, p int) time.Duration {
	k := (len(sorted)*p + 99) / 100 // ceil(n·p/100), the rank
	return sorted[max(k-1, 0)]
}

// threadTime is the calling thread's CPU time.
func threadTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// fastPathEnv builds the benchmark's router (real change set, TDD
// journal, policy engine with testdata/bench_policy.yaml, audit log), a
// no-op fast-path tool and one call of it, and warms them up.
//
// The process's garbage collector is set as the kernel process sets its
// own at start-up (kernel.TuneGC with the default configuration, GOGC and
// GOMEMLIMIT in the environment winning), for the benchmark's duration.
func fastPathEnv(b *testing.B) (*router.Router, llm.ToolCall) {
	return fastPathEnvTraced(b, nil)
}

// BenchmarkFastPathTraced is BenchmarkFastPath with tracing on: the
// OpenTelemetry SDK with its batching processor, whose exporter drops the
// spans (no network), so the figure is what tracing adds to a call.
func BenchmarkFastPathTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r, c := fastPathEnvTraced(b, telemetry.NewTracer(tp.Tracer("bench"), false))
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := r.Call(ctx, c)
		lat = append(lat, time.Since(t0))
		if err != nil || res.IsError {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	reportPercentiles(b, lat, "")
}

func fastPathEnvTraced(b *testing.B, tr *telemetry.Tracer) (*router.Router, llm.ToolCall) {
	b.Cleanup(kernel.TuneGC(config.Default(nil).Kernel, os.LookupEnv))
	pol, err := os.ReadFile("testdata/bench_policy.yaml")
	must(b, err)
	e := newEnv(b, setup{userPolicy: pol, hook: func(o *router.Options) { o.Tracer = tr }})
	type in struct {
		Path string `json:"path"`
	}
	noop, err := tool.New(tool.Definition[in]{
		Name: "bench.noop", Description: "Does nothing.", Action: operation.Read, Tags: []string{tool.TagReads},
		Execution: tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, r *tool.Resolver, x *in, op *operation.Operation) error {
			p, err := r.Resolve(x.Path)
			op.Paths = append(op.Paths, p)
			return err
		},
		Run: func(context.Context, *in) (tool.Result, error) { return tool.Result{Output: []byte("ok\n")}, nil },
	})
	must(b, err)
	must(b, e.reg.Register(noop))
	raw, _ := json.Marshal(map[string]any{"path": "pkg/calc.go"})
	c := llm.ToolCall{ID: "b", Name: "bench.noop", Args: raw}
	for range benchWarmup {
		if res, err := e.r.Call(context.Background(), c); err != nil || res.IsError {
			b.Fatalf("%+v %v", res, err)
		}
	}
	return e.r, c
}

// cpuTime is the process's user+system CPU time: on a shared, loaded
// machine it says what a call costs better than wall time (it includes the
// audit log's background writer).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 5000)
	for i := range s {
		s[i] = time.Duration(i + 1) // 1..5000
	}
	for _, c := range []struct {
		n, p int
		want time.Duration
	}{{5000, 99, 4950}, {5000, 50, 2500}, {100, 99, 99}, {100, 100, 100}, {1, 99, 1}, {10, 50, 5}} {
		if got := percentile(s[:c.n], c.p); got != c.want {
			t.Errorf("p%d of 1..%d = %d, want %d", c.p, c.n, got, c.want)
		}
	}
}

// BenchmarkMachineJitter is the yardstick for the fast path's tail: a
// pure-CPU loop calibrated to the fast path's median (~25 µs: no syscall,
// no allocation, no lock, one goroutine), timed per iteration like
// BenchmarkFastPath. Its p99 is what this machine adds to any 25 µs of
// work — timer interrupts, the hypervisor taking the vCPU, other
// processes — so the router's own tail is the fast path's p99 beyond it.
func BenchmarkMachineJitter(b *testing.B) {
	n := 1000
	for {
		t0 := time.Now()
		spin(n)
		if time.Since(t0) >= 25*time.Microsecond {
			break
		}
		n += n / 8
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		spin(n)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat, "")
}

var spinSink uint64

func spin(n int) {
	var s uint64
	for i := range n {
		s += uint64(i) * uint64(i) % 7
	}
	spinSink += s
}

// BenchmarkSandboxCall is one sandboxed call through every gate: the
// gate records and exec.start durable before the command (write-ahead),
// exec.end durable before the result.
func BenchmarkSandboxCall(b *testing.B) {
	e := newEnv(b, setup{sandbox: true})
	var ds []time.Duration
	for b.Loop() {
		t := time.Now()
		res, err := e.r.Call(b.Context(), tc("shell.exec", map[string]any{"command": "cat README.md"}))
		if err != nil || res.IsError {
			b.Fatalf("%+v, %v", res, err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}
