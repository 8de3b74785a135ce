package builtin

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
