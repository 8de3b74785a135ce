package audit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// The cycle is what one `fluffy sandbox run` does with the audit log
// (internal/sandboxrun/audit.go): open the log, append exec.start and
// make it durable (the command waits for that), run the command, append
// exec.end and close (the final checkpoint goes with it). The command is
// not part of the cycle.

// cycleDir is where the cycle benchmark and test keep their logs: the
// real disk (/var/tmp), not a tmpfs, since fsync is what they measure.
func cycleDir(tb testing.TB) string {
	tb.Helper()
	base := "/var/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = ""
	}
	dir, err := os.MkdirTemp(base, "fluffy-audit-cycle-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// cycleOptions are the options `fluffy sandbox run` opens the log with
// (the defaults, a wait for another writer's lock, and the WAL left for
// the next run).
func cycleOptions(dir string) audit.Options {
	return audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys"), LockWait: 5 * time.Second, KeepWAL: true}
}

// seedLog creates a log of n entries, written as the CLI writes them
// (one process per command, so one checkpoint per run).
func seedLog(tb testing.TB, dir string, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 2 {
		if err := runCycle(ctx, cycleOptions(dir), nil); err != nil {
			tb.Fatal(err)
		}
	}
}

// cyclePhases are the three phases of a cycle.
var cyclePhases = []string{"open", "start", "end"}

// runCycle runs one cycle; mark, when not nil, is called after each
// phase with its name.
func runCycle(ctx context.Context, opts audit.Options, mark func(string)) error {
	if mark == nil {
		mark = func(string) {}
	}
	l, err := audit.Open(ctx, opts)
	if err != nil {
		return err
	}
	mark("open")
	argv := []string{"/bin/true"}
	if _, err := l.Append(ctx, audit.Entry{Kind: audit.KindExecStart, Actor: "cli", Payload: map[string]any{
		"template": "code-executor", "argv": argv, "dir": "/work/repo", "workspace": "/work/repo", "changeset": "",
		"network": "none", "seccomp": "standard",
		"limits": map[string]any{"wall_ms": 600000, "memory": 2147483648, "pids": 512, "cpu_ms": 0, "file_size": 1 << 30, "open_files": 1024, "output": 1 << 20, "tmp": 64 << 20},
	}}); err != nil {
		l.Close()
		return err
	}
	if err := l.Flush(ctx); err != nil {
		l.Close()
		return err
	}
	mark("start")
	if _, err := l.Append(ctx, audit.Entry{Kind: audit.KindExecEnd, Actor: "cli", Payload: map[string]any{
		"template": "code-executor", "argv": argv, "exit_code": 0, "signal": "", "killed": "", "limits_hit": []string{},
		"duration_ms": 1, "warnings": []string(nil),
	}}); err != nil {
		l.Close()
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	mark("end")
	return nil
}

// helperCycles runs AUDIT_CYCLES cycles on the log in dir, marking each
// phase's end with a failed open of a marker path that strace shows.
func helperCycles(dir string) int {
	n, _ := strconv.Atoi(os.Getenv("AUDIT_CYCLES"))
	ctx := context.Background()
	mark := func(phase string) { _, _ = os.Stat("/.fluffy-audit-mark/" + phase) }
	for i := 0; i < n; i++ {
		mark("begin")
		if err := runCycle(ctx, cycleOptions(dir), mark); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// syncCounts runs cycles cycles on the log in dir in a child process
// under strace and returns the fsync-family calls per cycle in each
// phase (summed over the cycles). The background fdatasync of the
// checkpoint file that Open starts lands wherever its goroutine runs (a
// later phase, or between cycles, on a busy machine): it is counted
// apart, as "witness", by the path strace shows (-y). It skips the test
// when strace is missing or cannot trace.
func syncCounts(tb testing.TB, dir string, cycles int) map[string]int {
	tb.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		tb.Skip("strace is not installed (scripts/deps.sh installs it)")
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(tb.TempDir(), "strace.out")
	cmd := exec.Command(strace, "-f", "-qq", "-y", "-o", out,
		"-e", "trace=fsync,fdatasync,syncfs,sync_file_range,msync,newfstatat,statx,stat",
		self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "AUDIT_HELPER=cycles", "AUDIT_DIR="+dir, "AUDIT_CYCLES="+strconv.Itoa(cycles))
	if b, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(b), "ptrace") || strings.Contains(string(b), "Operation not permitted") {
			tb.Skipf("strace cannot trace here: %s", b)
		}
		tb.Fatalf("cycles under strace: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	phase := ""
	var ends int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "/.fluffy-audit-mark/"); i >= 0 {
			name := line[i+len("/.fluffy-audit-mark/"):]
			name = name[:strings.IndexAny(name, `"`)]
			// The phase that starts after this marker.
			switch name {
			case "begin":
				phase = "open"
			case "open":
				phase = "start"
			case "start":
				phase = "end"
			case "end":
				phase, ends = "", ends+1
			}
			continue
		}
		for _, call := range []string{"fsync(", "fdatasync(", "syncfs(", "sync_file_range(", "msync("} {
			if strings.Contains(line, " "+call) || strings.Contains(line, "]"+call) || strings.HasPrefix(line, call) {
				if strings.Contains(line, "/"+audit.CheckpointFile+">") {
					counts["witness"]++
					continue
				}
				if phase == "" {
					tb.Fatalf("%s outside a cycle phase: %s", call, line)
				}
				counts[phase]++
			}
		}
	}
	if ends != cycles {
		tb.Fatalf("strace log shows %d complete cycles, want %d", ends, cycles)
	}
	return counts
}

// processCPU is the process's user + system CPU time so far: on a shared
// machine, what the cycle costs when wall time mostly measures the
// neighbours.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCycle measures the audit log's part of one `fluffy sandbox
// run` on a log of about 1,000 entries in /var/tmp: open, exec.start made
// durable, exec.end and close. It reports the time of each phase and,
// when strace is installed, the fsync-family calls per cycle (counted in
// a separate run of 20 cycles under strace, outside the timing).
func BenchmarkCycle(b *testing.B) {
	dir := cycleDir(b)
	seedLog(b, dir, 1000)
	ctx := context.Background()
	opts := cycleOptions(dir)
	phases := map[string][]time.Duration{}
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := runCycle(ctx, opts, func(p string) {
			t := time.Now()
			phases[p] = append(phases[p], t.Sub(t0))
			t0 = t
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	for _, p := range cyclePhases {
		d := phases[p]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), p+"-p50-µs")
	}
	if _, err := exec.LookPath("strace"); err == nil {
		const n = 20
		counts := syncCounts(b, dir, n)
		total := 0
		for _, p := range append(cyclePhases[:len(cyclePhases):len(cyclePhases)], "witness") {
			total += counts[p]
			b.ReportMetric(float64(counts[p])/n, p+"-fsyncs/op")
		}
		b.ReportMetric(float64(total)/n, "fsyncs/op")
	}
}

// TestCycleSyncs counts the fsync-family calls of the CLI's cycle, under
// strace in a child process, on a log whose WAL is below the size at
// which Open checkpoints it: after the command (exec.end and close)
// exactly one, SQLite's commit of the WAL; before it at most two (the WAL
// commit of exec.start, and the directory SQLite syncs once per process),
// plus the background fdatasync of the checkpoint file that Open starts
// (one per cycle, wherever it lands).
//
// Then 20 more cycles, which take the WAL past the size at which Open
// copies it into audit.db once (three fsyncs, and the next commit's WAL
// header one), and no more than once.
func TestCycleSyncs(t *testing.T) {
	dir := cycleDir(t)
	seedLog(t, dir, 4)
	const n = 5
	c := syncCounts(t, dir, n)
	t.Logf("fsync-family calls in %d cycles, by phase: %v", n, c)
	if c["end"] != n {
		t.Errorf("%d syncs after the command in %d cycles, want exactly 1 each (the exec.end commit)", c["end"], n)
	}
	if c["start"] > 2*n {
		t.Errorf("%d syncs for exec.start in %d cycles, want at most 2 each", c["start"], n)
	}
	if c["witness"] != n {
		t.Errorf("%d syncs of the checkpoint file in %d cycles, want 1 each (Open's)", c["witness"], n)
	}
	if total := c["open"] + c["start"] + c["end"] + c["witness"]; total > 4*n {
		t.Errorf("%d syncs in %d cycles, want at most 4 each", total, n)
	}
	const m = 20
	c = syncCounts(t, dir, m)
	t.Logf("fsync-family calls in %d more cycles, by phase: %v", m, c)
	if c["end"] != m {
		t.Errorf("%d syncs after the command in %d cycles, want exactly 1 each", c["end"], m)
	}
	if total := c["open"] + c["start"] + c["end"] + c["witness"]; total > 4*m+8 || total < 4*m+1 {
		t.Errorf("%d syncs in %d cycles, want 4 each and one WAL copy (4 more, at most 2 copies)", total, m)
	}
}
