package router_test

import (
	"context"
	"encoding/json"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// BenchmarkFastPath measures the router's own overhead on the fast path:
// lookup, strict decoding and schema validation, path normalization,
// the TDD gate, the policy engine (default rules + built-ins + a user
// file), sanitizing and the buffered audit append. The tool's own work is
// excluded (it returns a constant). Reports p50 and p99 per call.
func BenchmarkFastPath(b *testing.B) {
	e := newEnv(b, setup{})
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
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		t0 := time.Now()
		res, err := e.r.Call(ctx, c)
		lat = append(lat, time.Since(t0))
		if err != nil || res.IsError {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
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
