package bootstrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// BenchmarkKernelStart measures a kernel's cold start as the bootstrap
// sees it: launch, then poll until the first pong. With FLUFFY_BENCH_BIN
// set to a fluffy build it starts the real `fluffy kernel --oneshot`;
// otherwise the test kernel (this binary).
func BenchmarkKernelStart(b *testing.B) {
	bin := os.Getenv("FLUFFY_BENCH_BIN")
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLUFFY_") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	for b.Loop() {
		b.StopTimer()
		home := b.TempDir()
		sock := filepath.Join(home, ipc.SocketName)
		e := Exec{Path: self, Args: []string{"-test.run=^$"}, Env: append(env, envSocket+"="+sock, envMode+"=serve")}
		if bin != "" {
			e = Exec{Path: bin, Args: []string{"kernel", "--oneshot"}, Env: append(env, "FLUFFY_HOME="+home)}
		}
		b.StartTimer()
		c, err := Connect(context.Background(), Options{Socket: sock, Launcher: e})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		pid := int(c.ServerCred().PID)
		c.Close()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		b.StartTimer()
	}
}
