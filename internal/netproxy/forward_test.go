package netproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/netproxy/forward"
)

// TestMain lets the test binary play the fluffy binary's forwarder role.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ForwardCommand {
		os.Exit(ForwardMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == netnsChild {
		os.Exit(netnsChildMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// unixProxy serves a proxy on a unix socket in a temp dir.
func unixProxy(t *testing.T, allow ...string) (sock string, rec *memRecorder) {
	t.Helper()
	al, err := ParseAllowList(allow)
	if err != nil {
		t.Fatal(err)
	}
	rec = &memRecorder{}
	p, err := New(Options{Allow: al, Recorder: rec, Sandbox: "sb-f"})
	if err != nil {
		t.Fatal(err)
	}
	sock = t.TempDir() + "/egress.sock"
	ln, err := ListenUnix(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Serve(ln); close(done) }()
	t.Cleanup(func() { p.Close(); <-done })
	return sock, rec
}

func proxyClient(t *testing.T, addr string) *http.Client {
	u, _ := url.Parse("http://" + addr)
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func TestForward(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(append([]byte("got "), b...))
	}))
	defer up.Close()
	sock, rec := unixProxy(t, "127.0.0.1:"+port(t, up.URL))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var d net.Dialer
	go func() {
		done <- forward.Forward(ctx, ln, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })
	}()
	c := proxyClient(t, ln.Addr().String())
	for range 3 {
		resp, err := c.Post(up.URL, "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "got body" {
			t.Fatalf("body %q", b)
		}
	}
	resp, err := c.Get("http://denied.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("denied host through the forwarder: %d", resp.StatusCode)
	}
	if r := rec.wait(t, 4); r[0].Sandbox != "sb-f" || r[3].Decision != Denied {
		t.Errorf("records %s", fmtRecs(r))
	}
	// An open, idle client connection must not keep Forward from ending.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(20 * time.Millisecond)
	c.Transport.(*http.Transport).CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Forward: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Forward did not stop")
	}
}

// TestForwardMain runs the forwarder as the binary does, in a child
// process, and stops it with SIGTERM.
func TestForwardMain(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "through") }))
	defer up.Close()
	sock, _ := unixProxy(t, "127.0.0.1:"+port(t, up.URL))
	// Find a free port for the child to listen on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Args[0], ForwardCommand, "-listen", addr, "-socket", sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("forwarder said %q, %v", line, err)
	}
	resp, err := proxyClient(t, addr).Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "through" {
		t.Fatalf("body %q", b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("forwarder exit: %v", err)
	}

	// Usage errors exit 2.
	err = exec.Command(os.Args[0], ForwardCommand, "-listen", addr).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("forwarder without -socket: %v", err)
	}
}
