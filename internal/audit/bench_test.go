package audit

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user + system CPU time so far. On a shared
// machine, entries per CPU-second says what the code costs when wall-clock
// rates mostly measure the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPayload is a typical exec.start payload.
var benchPayload = map[string]any{"template": "code-executor", "argv": []string{"go", "test", "./..."}, "cwd": "/work/repo", "limits": map[string]any{"memory": 2147483648, "pids": 512}}

func benchLog(b *testing.B, opts Options) *Log {
	dir := b.TempDir()
	opts.Path, opts.KeyDir = filepath.Join(dir, "audit.db"), filepath.Join(dir, "keys")
	l, err := Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAppendBuffered measures buffered appends, including the
// batched writes they cause (the final flush is inside the timing).
func BenchmarkAppendBuffered(b *testing.B) {
	l := benchLog(b, Options{})
	ctx := context.Background()
	e := Entry{Session: "bench", Kind: KindExecStart, Actor: "agent", Payload: benchPayload}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "entries/cpu-s")
	l.Close()
}

// BenchmarkAppendSync measures synchronous (durable) appends and reports
// the median and 99th percentile latency, and the CPU time per append
// (the fsync's wait is most of the wall time).
func BenchmarkAppendSync(b *testing.B) {
	l := benchLog(b, Options{})
	ctx := context.Background()
	e := Entry{Session: "bench", Kind: KindGatePolicy, Actor: "policy", Payload: map[string]any{"rule": "builtin.protect-keys", "effect": "block"}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	l.Close()
}

// BenchmarkVerify measures a full verification of a 200,000-entry log.
func BenchmarkVerify(b *testing.B) {
	const n = 200_000
	l := benchLog(b, Options{FlushEntries: 1000})
	ctx := context.Background()
	e := Entry{Session: "bench", Kind: KindExecStart, Actor: "agent", Payload: benchPayload}
	for i := 0; i < n; i++ {
		if _, err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	r, err := OpenReader(ctx, l.opts.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	k, _ := LoadKey(l.opts.KeyDir)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		rep, err := r.Verify(ctx, VerifyOptions{Verifier: k.Verifier, Full: true})
		if err != nil || rep.Size != n {
			b.Fatal(rep, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "entries/cpu-s")
}
