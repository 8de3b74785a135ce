package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkSchedule10k is the scheduling overhead per task with 10,000
// tasks queued: each operation submits a task and ends a running one,
// which starts the next in line. Tasks mix classes, 100 sessions, and
// the resources of daemon turns, model calls and commands. It reports
// the median and 99th percentile of one operation (docs/benchmarks.md).
func BenchmarkSchedule10k(b *testing.B) {
	s, err := New(Options{Limits: Limits{Global: 4, PerSession: 1, Resources: map[Resource]int64{Sandboxes: 2, Model("anthropic"): 4}}})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	mk := func(i int) Task {
		t := Task{Class: Class(r.IntN(3)), Session: fmt.Sprintf("s%d", r.IntN(100))}
		switch r.IntN(3) {
		case 1:
			t.Inner, t.Needs = true, map[Resource]int64{Model("anthropic"): 1}
		case 2:
			t.Inner, t.Needs = true, map[Resource]int64{Sandboxes: 1}
		}
		return t
	}
	var running []*Lease
	held := map[*entry]bool{}
	// take holds the leases of the tasks that started.
	take := func() {
		for e := range s.running {
			if !held[e] {
				held[e] = true
				running = append(running, &Lease{s: s, e: e})
			}
		}
	}
	for i := range 10000 {
		if _, err := s.Submit(mk(i)); err != nil {
			b.Fatal(err)
		}
	}
	take()
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := s.Submit(mk(i)); err != nil {
			b.Fatal(err)
		}
		l := running[0]
		running = running[1:]
		l.Release()
		times = append(times, time.Since(t0))
		b.StopTimer()
		delete(held, l.e)
		take()
		b.StartTimer()
		if len(running) == 0 {
			b.Fatal("nothing runs")
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(s.Status().Queued["interactive"]+s.Status().Queued["triggered"]+s.Status().Queued["background"]), "queued")
}
