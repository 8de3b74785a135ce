package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// BenchmarkMCPServeRead measures the round trip of a trivial call
// (fs.read of a small file) made by an MCP client on the official SDK
// through "fluffy mcp serve" (mcp-*), against the same call of the same
// session sent straight to the kernel (session.call over IPC, ipc-*):
// the difference is what the MCP server adds. Each iteration makes one
// call each way; each call is timed alone, p50 and p99 are of those
// samples (ns/op counts both calls).
// FLUFFY_BENCH_BIN is the binary (a real build, bin/fluffy);
// FLUFFY_BENCH_HOME, when set, the data directory (kept).
func BenchmarkMCPServeRead(b *testing.B) {
	bin := os.Getenv("FLUFFY_BENCH_BIN")
	if bin == "" {
		b.Skip("set FLUFFY_BENCH_BIN to a fluffy build (make build: bin/fluffy)")
	}
	home, ws := b.TempDir(), filepath.Join(b.TempDir(), "repo")
	if h := os.Getenv("FLUFFY_BENCH_HOME"); h != "" {
		home = h // kept afterwards, with the kernel's log
	}
	for _, d := range []string{filepath.Join(ws, ".git")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLUFFY_") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, "FLUFFY_HOME="+home, "XDG_RUNTIME_DIR=", "FLUFFY_KERNEL_IDLE_TIMEOUT=10s")
	ctx := context.Background()
	cmd := exec.Command(bin, "mcp", "serve", "--workspace", ws)
	cmd.Env = env
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cs.Close()
		stop := exec.Command(bin, "kernel", "stop")
		stop.Env = env
		_ = stop.Run()
	}()
	read := &mcp.CallToolParams{Name: "fs__read", Arguments: map[string]any{"path": "README.md"}}
	res, err := cs.CallTool(ctx, read)
	if err != nil || res.IsError {
		b.Fatalf("%+v %v", res, err)
	}
	session, _ := res.Meta["fluffy/session"].(string)
	c, err := ipc.Dial(ctx, ipc.SocketPath("", home), ipc.ClientOptions{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := kernel.CallParams{ID: session, Name: "fs__read", Args: json.RawMessage(`{"path": "README.md"}`)}
	viaMCP := func() error {
		res, err := cs.CallTool(ctx, read)
		if err == nil && res.IsError {
			b.Fatalf("%+v", res)
		}
		return err
	}
	viaIPC := func() error {
		var r struct{ IsError bool }
		err := c.Call(ctx, kernel.MethodCall, p, &r)
		if err == nil && r.IsError {
			b.Fatal("fs.read failed")
		}
		return err
	}
	// The two in turn, their order swapped every iteration, so that both
	// meet the same load.
	var mcpLat, ipcLat []time.Duration
	timed := func(lat *[]time.Duration, call func() error) {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		*lat = append(*lat, time.Since(t0))
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(&mcpLat, viaMCP)
			timed(&ipcLat, viaIPC)
		} else {
			timed(&ipcLat, viaIPC)
			timed(&mcpLat, viaMCP)
		}
		i++
	}
	reportLatency(b, "mcp", mcpLat)
	reportLatency(b, "ipc", ipcLat)
}

// reportLatency reports the median and the 99th percentile of lat.
func reportLatency(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), name+"-p99-µs")
}
