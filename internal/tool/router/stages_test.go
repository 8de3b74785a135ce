package router_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// BenchmarkRouterStages times the fast path's stages on their own, in
// thread CPU time per call (as BenchmarkFastPathOnCPU): where the
// median and the tail of a call come from.
func BenchmarkRouterStages(b *testing.B) {
	pol, err := os.ReadFile("testdata/bench_policy.yaml")
	must(b, err)
	e := newEnv(b, setup{userPolicy: pol})
	ctx := context.Background()
	fsRead, err := e.reg.Lookup("fs.read")
	must(b, err)
	raw, _ := json.Marshal(map[string]any{"path": "pkg/calc.go"})
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: e.ws, FS: e.cs.Links()})
	must(b, err)
	eng, err := policy.Compile(policy.Options{Home: e.home}, policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: pol})
	must(b, err)
	args, err := fsRead.Decode(raw)
	must(b, err)
	op, err := fsRead.Normalize(ctx, res, args, operation.Session{ID: "s1", Workspace: e.ws})
	must(b, err)
	san := tool.NewSanitizer(tool.SanitizerOptions{})
	var o audit.Object
	stages := []struct {
		name string
		fn   func()
	}{
		{"decode", func() { _, _ = fsRead.Decode(raw) }},
		{"resolve", func() { _, _ = res.Resolve("pkg/calc.go") }},
		{"state", func() { _ = e.tdd.Allowed(*op) }},
		{"policy", func() { _ = eng.Decide(ctx, *op) }},
		{"sanitize", func() { _ = san.Sanitize([]byte("ok\n")) }},
		{"audit", func() {
			o.Reset()
			o.String("call", "b")
			o.String("tool", "fs.read")
			if _, err := e.log.Append(ctx, audit.Entry{Session: "s1", Kind: "tool.read", Actor: "agent", Payload: &o}); err != nil {
				b.Fatal(err)
			}
		}},
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, st := range stages {
		b.Run(st.name, func(b *testing.B) {
			for range benchWarmup {
				st.fn()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := threadTime()
				st.fn()
				lat = append(lat, threadTime()-t0)
			}
			b.StopTimer()
			reportPercentiles(b, lat, "cpu-")
		})
	}
}
