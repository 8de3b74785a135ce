package builtin

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// BenchmarkGrep runs search.grep and ripgrep on the same tree (the Go
// standard library's sources) for the same pattern, in one run: the
// sub-benchmarks' ratio is the figure. The match cap is lifted so both
// read every file.
func BenchmarkGrep(b *testing.B) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("no go command")
	}
	src := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	if _, err := os.Stat(src); err != nil || os.Geteuid() != 0 {
		b.Skip("needs GOROOT/src and root (change set)")
	}
	cs, err := changeset.Begin(context.Background(), src, filepath.Join(b.TempDir(), "cs"))
	if err != nil {
		b.Fatal(err)
	}
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: src, FS: cs.Links()})
	if err != nil {
		b.Fatal(err)
	}
	reg := tool.NewRegistry()
	if err := Register(reg, Options{ChangeSet: cs, Resolver: res, MaxMatches: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	grep, _ := reg.Lookup("search.grep")
	rg, rgErr := exec.LookPath("rg")
	counts := map[string]int{}
	// Each pair searches the same files: .gitignore respected (ripgrep
	// outside a git repository needs --no-require-git for that), then
	// every file; for a pattern with a rare literal, a common one, and
	// one without a literal.
	for _, pat := range []struct{ name, re string }{
		{"rare", `func \(\w+ \*Reader\) Read\w*\(`},
		{"common", `err != nil`},
		{"noliteral", `^\s*//\s*[A-Z]{4,}:`},
	} {
		pattern := pat.re
		for _, c := range []struct {
			name    string
			ignored bool
			rgArgs  []string
		}{
			{"gitignore", false, []string{"--no-require-git"}},
			{"all", true, []string{"--no-ignore"}},
		} {
			raw, _ := json.Marshal(map[string]any{"pattern": pattern, "max_matches": 1 << 30, "include_ignored": c.ignored})
			b.Run(pat.name+"/fluffy-"+c.name, func(b *testing.B) {
				cpu0 := cpuTime()
				for range b.N {
					args, err := grep.Decode(raw)
					if err != nil {
						b.Fatal(err)
					}
					out, err := grep.Run(context.Background(), args)
					if err != nil || out.IsError {
						b.Fatalf("%s %v", out.Output, err)
					}
					counts["fluffy-"+c.name] = strings.Count(string(out.Output), "\n")
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			})
			if rgErr != nil {
				b.Log("ripgrep not installed (apt-get install ripgrep): no comparison")
				continue
			}
			b.Run(pat.name+"/ripgrep-"+c.name, func(b *testing.B) {
				var cpu time.Duration
				for range b.N {
					args := append([]string{"-n", "--no-heading", "--hidden", "-g", "!.git"}, c.rgArgs...)
					cmd := exec.Command(rg, append(args, pattern, ".")...)
					cmd.Dir = src
					out, err := cmd.Output()
					if err != nil {
						b.Fatal(err)
					}
					cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
					counts["ripgrep-"+c.name] = strings.Count(string(out), "\n")
				}
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
			})
			if f, r := counts["fluffy-"+c.name], counts["ripgrep-"+c.name]; rgErr == nil && f != r {
				b.Errorf("%s %s: matches differ: search.grep %d, ripgrep %d", pat.name, c.name, f, r)
			}
		}
	}
}

// cpuTime is the user+system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
