package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStatusColdStart measures `fluffy status` with no kernel running:
// CLI start, bootstrap, kernel launch, first pong, the status call. It
// also reports the idle kernel's RSS from /proc. FLUFFY_BENCH_BIN chooses
// the binary (default: this test binary acting as fluffy; use a real
// build, e.g. bin/fluffy, for the figures in docs/benchmarks.md).
func BenchmarkStatusColdStart(b *testing.B) {
	bin := os.Getenv("FLUFFY_BENCH_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("fluffy"); err != nil {
			b.Skip("no fluffy binary:", err)
		}
	}
	var rss, rssN float64
	for b.Loop() {
		b.StopTimer()
		home := b.TempDir()
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "FLUFFY_") {
				env = append(env, kv)
			}
		}
		env = append(env, "FLUFFY_HOME="+home, "XDG_RUNTIME_DIR=", "FLUFFY_KERNEL_IDLE_TIMEOUT=10s")
		b.StartTimer()
		cmd := exec.Command(bin, "status", "--json")
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("fluffy status: %v\n%s", err, out.String())
		}
		b.StopTimer()
		var st struct {
			PID    int `json:"pid"`
			Served int `json:"served"`
		}
		if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Served != 1 {
			b.Fatalf("status: %v, %s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond) // let it settle to idle
		if kib := vmRSS(st.PID); kib > 0 {
			rss += float64(kib) / 1024
			rssN++
		}
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
		for syscall.Kill(st.PID, 0) == nil {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
	}
	if rssN > 0 {
		b.ReportMetric(rss/rssN, "idle-RSS-MiB")
	}
}

// vmRSS reads a process's resident set size in KiB from /proc.
func vmRSS(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
