package wiring_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/cli"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/wiring"
)

// BenchmarkServeSetup is the sandbox server's own cost of one forwarded
// command before any sandbox: the command tree, the configuration and the
// flags (a template that does not exist stops it right there).
func BenchmarkServeSetup(b *testing.B) {
	dir := b.TempDir()
	env := []string{"HOME=" + dir, "FLUFFY_HOME=" + dir + "/data", "XDG_CONFIG_HOME=" + dir + "/config"}
	core := wiring.New()
	host := core.NewSandboxHost(&userenv.Env{Environ: env, Cwd: dir, Self: "/nonexistent"})
	defer host.Close()
	for b.Loop() {
		var stderr strings.Builder
		a := &cli.App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Environ: env, Cwd: dir, Self: "/nonexistent", Host: host, Core: core}
		if code := cli.Main(context.Background(), a, []string{"sandbox", "run", "--template", "nope", "--", "/bin/true"}); code != cli.ExitUsage {
			b.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
}
