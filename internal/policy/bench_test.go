package policy

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// thousandRules is a policy of 1,000 rules spread over 100 tools and every
// action, with paths, argv patterns, hosts and some CEL conditions: the
// shape of a large real policy.
func thousandRules() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	actions := operation.Actions()
	for i := range 1000 {
		fmt.Fprintf(&b, "  - id: r%d\n    effect: %s\n    match:\n", i, []string{"allow", "approve", "block"}[i%3])
		fmt.Fprintf(&b, "      tool: tool%d.*\n", i%100)
		fmt.Fprintf(&b, "      action: %s\n", actions[i%len(actions)])
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "      path: \"dir%d/**/*.go\"\n", i)
		case 1:
			fmt.Fprintf(&b, "      argv: [cmd%d, sub, ...]\n", i)
		case 2:
			fmt.Fprintf(&b, "      host: \"*.host%d.com:443\"\n", i)
		case 3:
			fmt.Fprintf(&b, "      path: \"/abs/%d/**\"\n    when: 'op.size > size(\"%dKiB\")'\n", i, i)
		}
	}
	// A handful of rules on the tools the benchmark uses.
	b.WriteString(`  - id: fs-docs
    effect: approve
    match: {tool: fs.write, path: "docs/**"}
  - id: fs-big
    effect: block
    match: {tool: fs.write}
    when: 'op.size > size("100MiB")'
  - id: go-test-race
    effect: approve
    match: {tool: shell.exec, argv: [go, test, ..., -race, ...]}
`)
	return b.String()
}

func benchEngine(b *testing.B) *Engine {
	e, err := Compile(Options{Protected: Protected{Paths: []string{"/data", "/home/u/.config/fluffy", "/ws/.fluffy", "/usr/local/bin/fluffy"}, Secret: []string{"/data/keys"}}},
		Source{Name: "bench.yaml", Layer: LayerUser, Data: []byte(thousandRules())})
	if err != nil {
		b.Fatal(err)
	}
	if n := len(e.Rules()); n < 1000 {
		b.Fatalf("%d rules", n)
	}
	return e
}

// BenchmarkDecide1000Rules is one fs.write decision against 1,000 user
// rules plus the built-in and default rules.
func BenchmarkDecide1000Rules(b *testing.B) {
	e := benchEngine(b)
	op := operation.Operation{Tool: "fs.write", Action: operation.Write, Size: 2048,
		Paths:   []operation.Path{{Abs: "/ws/internal/policy/engine.go", InWorkspace: true}},
		Session: operation.Session{ID: "s1", Mode: "strict", Workspace: "/ws"}}
	ctx := b.Context()
	if d := e.Decide(ctx, op); d.Effect != Allow {
		b.Fatalf("%v", d)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		e.Decide(ctx, op)
	}
	reportCPU(b, start)
}

// BenchmarkDecideShell1000Rules decides a normalized shell command line of
// three commands against the same policy.
func BenchmarkDecideShell1000Rules(b *testing.B) {
	e := benchEngine(b)
	op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: "go vet ./... && go test ./internal/... > test.log",
		Session: operation.Session{ID: "s1", Mode: "strict", Workspace: "/ws"}}
	if err := Normalize(&op, "/ws"); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	if d := e.Decide(ctx, op); d.Effect != Allow {
		b.Fatalf("%v", d)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		e.Decide(ctx, op)
	}
	reportCPU(b, start)
}

// cpuTime is the process's user+system CPU time. On a shared machine the
// wall-clock ns/op includes time spent waiting for a core; cpu-ns/op does
// not (it does include the garbage collector's background work).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}
