package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aymanbagabas/go-udiff"

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
	const pattern = `func \(\w+ \*Reader\) Read\w*\(`
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
	raw, _ := json.Marshal(map[string]any{"pattern": pattern, "max_matches": 1 << 30})
	var fluffyN, rgN int
	b.Run("fluffy", func(b *testing.B) {
		for range b.N {
			args, err := grep.Decode(raw)
			if err != nil {
				b.Fatal(err)
			}
			out, err := grep.Run(context.Background(), args)
			if err != nil || out.IsError {
				b.Fatalf("%s %v", out.Output, err)
			}
			fluffyN = strings.Count(string(out.Output), "\n")
		}
	})
	rg, err := exec.LookPath("rg")
	if err != nil {
		b.Log("ripgrep not installed (apt-get install ripgrep): no comparison")
		return
	}
	b.Run("ripgrep", func(b *testing.B) {
		for range b.N {
			cmd := exec.Command(rg, "-n", "--no-heading", "--no-ignore", "--hidden", "-g", "!.git", pattern, ".")
			cmd.Dir = src
			out, err := cmd.Output()
			if err != nil {
				b.Fatal(err)
			}
			rgN = strings.Count(string(out), "\n")
		}
	})
	if fluffyN != rgN {
		b.Logf("matches differ: search.grep %d, ripgrep %d", fluffyN, rgN)
	}
}

// BenchmarkEditDiff applies a 20-hunk diff to a 10,000-line file (parse,
// locate, apply; no change set).
func BenchmarkEditDiff(b *testing.B) {
	var lines []string
	for i := range 10000 {
		lines = append(lines, fmt.Sprintf("line %d: some text that is long enough to look like code();", i))
	}
	a := strings.Join(lines, "\n") + "\n"
	for i := 0; i < 10000; i += 500 {
		lines[i] = lines[i] + " // changed"
	}
	d, err := udiff.ToUnified("a/f.go", "b/f.go", a, udiff.Lines(a, strings.Join(lines, "\n")+"\n"), 3)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(a)))
	for b.Loop() {
		fps, err := parsePatch(d, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := applyHunks("f.go", a, fps[0].Hunks); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNearestMiss is the worst case of a failing edit: a 200-line old
// text matching nothing in a 20,000-line file (the bound on the kernel's
// work whatever a model sends).
func BenchmarkNearestMiss(b *testing.B) {
	s := strings.Repeat(strings.Repeat("x", 300)+"\n", 20000)
	old := strings.Repeat(strings.Repeat("y", 299)+"x\n", 200)
	for b.Loop() {
		if _, err := replaceOnce("f", s, old, ""); err == nil {
			b.Fatal("replaced")
		}
	}
}
