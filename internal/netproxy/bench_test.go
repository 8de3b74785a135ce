package netproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// BenchmarkRequest measures one small GET on loopback, keep-alive on,
// directly and through the proxy (TCP and unix socket): the difference is
// the proxy's per-request overhead (parse, checks, audit record, relay).
func BenchmarkRequest(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	al, _ := ParseAllowList([]string{"127.0.0.1:" + mustPort(up.URL)})

	run := func(b *testing.B, tr *http.Transport) {
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			resp, err := c.Get(up.URL)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, &http.Transport{}) })
	b.Run("direct-new-conn", func(b *testing.B) { run(b, &http.Transport{DisableKeepAlives: true}) })
	b.Run("proxy-tcp", func(b *testing.B) {
		p, _ := New(Options{Allow: al, Recorder: &memRecorder{}, AllowUncredentialed: true})
		defer p.Close()
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go p.Serve(ln)
		u, _ := url.Parse("http://" + ln.Addr().String())
		run(b, &http.Transport{Proxy: http.ProxyURL(u)})
	})
	b.Run("proxy-unix", func(b *testing.B) {
		p, _ := New(Options{Allow: al, Recorder: &memRecorder{}, AllowUncredentialed: true})
		defer p.Close()
		sock := b.TempDir() + "/egress.sock"
		ln, err := ListenUnix(sock, -1)
		if err != nil {
			b.Fatal(err)
		}
		go p.Serve(ln)
		var d net.Dialer
		u, _ := url.Parse("http://proxy")
		run(b, &http.Transport{Proxy: http.ProxyURL(u), DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}})
	})
	b.Run("proxy-connect", func(b *testing.B) {
		// A new tunnel per request: CONNECT set-up plus relaying.
		p, _ := New(Options{Allow: al, Recorder: &memRecorder{}, AllowUncredentialed: true})
		defer p.Close()
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go p.Serve(ln)
		// The dialer tunnels each connection to the plain-http upstream.
		run(b, &http.Transport{DisableKeepAlives: true, DialContext: (&connectDialer{proxy: ln.Addr().String()}).DialContext})
	})
}

// connectDialer dials through a CONNECT tunnel.
type connectDialer struct{ proxy string }

func (c *connectDialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.proxy)
	if err != nil {
		return nil, err
	}
	io.WriteString(conn, "CONNECT "+addr+" HTTP/1.1\r\n\r\n")
	// "HTTP/1.1 200 Connection established\r\n\r\n" is 39 bytes.
	buf := make([]byte, 39)
	if _, err := io.ReadFull(conn, buf); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func mustPort(u string) string {
	pu, _ := url.Parse(u)
	return pu.Port()
}
