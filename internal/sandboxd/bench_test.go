package sandboxd

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkClientProcess is the whole run of a client process, as the
// small fluffy binary is one: exec, Go runtime start, SocketPath, Call
// (an empty command on a running server), exit. "hello" is a Go program
// that does nothing, the floor of any Go client; "call-catch-after-50ms"
// sets ClientOptions.CatchSignalsAfter. cpu-ns/op is the client process's
// user + system time (the server's is not in it).
func BenchmarkClientProcess(b *testing.B) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		b.Skip("no go command")
	}
	dir := b.TempDir()
	for _, p := range []string{"probe", "hello"} {
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, p), "./testdata/"+p)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", p, err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	sock, err := SocketPath(self)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if pid := lockPID(sock); pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	})
	run := func(b *testing.B, env []string, argv ...string) {
		var cpu time.Duration
		for b.Loop() {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = env
			if err := cmd.Run(); err != nil {
				b.Fatalf("%s: %v", argv, err)
			}
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.Run("hello", func(b *testing.B) { run(b, nil, filepath.Join(dir, "hello")) })
	probe := []string{filepath.Join(dir, "probe"), self, modeServer, "--idle", "1m", "--", "exit", "0"}
	if out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput(); err != nil { // starts the server
		b.Fatalf("first call: %v\n%s", err, out)
	}
	env := os.Environ()
	b.Run("call", func(b *testing.B) { run(b, env, probe...) })
	b.Run("call-catch-after-50ms", func(b *testing.B) { run(b, append(env, "PROBE_CATCH_AFTER=50ms"), probe...) })
}
