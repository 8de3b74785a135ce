package kernel_test

import (
	"context"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// BenchmarkCreateFirstEvent measures a session's create (change set
// begin over a small workspace, row, audit entry) to its first event (the
// run persisted as running, model opened, tools built, turn_start), then
// the rest of a one-turn run. In process: IPC adds one round trip
// (docs/benchmarks.md, the rows "IPC round trip" and "kernel start").
func BenchmarkCreateFirstEvent(b *testing.B) {
	ctx := context.Background()
	e := openEnv(b, b.TempDir(), newWorkspace(b))
	defer e.close()
	k := start(b, e, scriptModels(`{"turn": {"text": "hi"}}`+"\n"), nil)
	var first, total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "replay/x"})
		if err != nil {
			b.Fatal(err)
		}
		var got bool
		if _, err := k.Run(ctx, info.ID, func(kernel.Event) {
			if !got {
				got = true
				first += time.Since(t0)
			}
		}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs-to-first-event")
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-whole-run")
}
