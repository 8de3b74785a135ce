package cli

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServeProbe: "fluffy serve probe" exits 0 only on a 200 from the
// path asked, prints the answer, and reaches serve.health by default,
// over TCP and a unix socket alike.
func TestServeProbe(t *testing.T) {
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready\nchannel deploy: starting")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "health.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []net.Listener{tcp, unix} {
		srv := &http.Server{Handler: mux}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	_, port, _ := net.SplitHostPort(tcp.Addr().String())
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := free.Addr().String()
	free.Close()

	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		a := &App{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Cwd: dir, Self: "/nonexistent/fluffy-core",
			Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}}
		code := Main(t.Context(), a, args)
		return code, stdout.String(), stderr.String()
	}
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"healthz", []string{"serve", "probe", "127.0.0.1:" + port}, ExitOK, "ok\n", ""},
		{"every interface is asked on loopback", []string{"serve", "probe", "0.0.0.0:" + port}, ExitOK, "ok\n", ""},
		{"readyz not ready", []string{"serve", "probe", "--ready", "127.0.0.1:" + port}, ExitFailure, "not ready\nchannel deploy: starting\n", "/readyz on 127.0.0.1:" + port + ": 503 Service Unavailable"},
		{"unix socket", []string{"serve", "probe", "unix:" + sock}, ExitOK, "ok\n", ""},
		{"serve.health by default", []string{"--set", "serve.health=unix:" + sock, "serve", "probe"}, ExitOK, "ok\n", ""},
		{"nobody listens", []string{"serve", "probe", closed}, ExitFailure, "", "/healthz on " + closed + ": not healthy: "},
		{"no serve.health", []string{"serve", "probe"}, ExitUsage, "", "serve.health is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := run(c.args...)
			if code != c.code || stdout != c.stdout || !strings.Contains(stderr, c.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", code, stdout, stderr, c.code, c.stdout, c.stderr)
			}
		})
	}
	ready.Store(true)
	if code, stdout, stderr := run("serve", "probe", "--ready", "unix:"+sock); code != ExitOK || stdout != "ready\n" {
		t.Errorf("ready: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestProbeTarget: where a probe dials for each form of serve.health.
func TestProbeTarget(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7878":   "tcp 127.0.0.1:7878",
		"0.0.0.0:7878":     "tcp 127.0.0.1:7878",
		":7878":            "tcp 127.0.0.1:7878",
		"[::]:7878":        "tcp [::1]:7878",
		"localhost:7878":   "tcp localhost:7878",
		"unix:/run/h.sock": "unix /run/h.sock",
	} {
		network, dial, err := probeTarget(addr)
		if got := network + " " + dial; err != nil || got != want {
			t.Errorf("probeTarget(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, _, err := probeTarget("7878"); err == nil {
		t.Error("probeTarget(\"7878\") has no error")
	}
}
