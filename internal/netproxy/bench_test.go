package netproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// auditLogRecorder records into an audit log: ahead, a decision is
// flushed before RecordEgress returns; otherwise everything is buffered.
type auditLogRecorder struct {
	l     *audit.Log
	ahead bool
}

func (a *auditLogRecorder) RecordEgress(ctx context.Context, r Record) error {
	kind := audit.KindNetRequest
	if r.Phase == PhaseEnd {
		kind = "net.end"
	} else if !a.ahead && r.Decision == Allowed {
		return nil // the end record stands for the request
	}
	if _, err := a.l.Append(ctx, audit.Entry{Kind: kind, Actor: "sandbox", Payload: map[string]any{
		"id": r.ID, "host": r.Host, "port": r.Port, "decision": string(r.Decision), "bytes_down": r.BytesDown}}); err != nil {
		return err
	}
	if a.ahead && r.Phase == PhaseOpen {
		return a.l.Flush(ctx)
	}
	return nil
}

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
	// With a real audit log on disk: every decision flushed before the
	// request goes on (as the CLI records them), against the records
	// only appended (buffered), as when the proxy recorded each request
	// once at its end.
	for _, ahead := range []bool{false, true} {
		name := "proxy-tcp-audit-buffered"
		if ahead {
			name = "proxy-tcp-audit-ahead"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			l, err := audit.Open(b.Context(), audit.Options{Path: dir + "/audit.db", KeyDir: dir + "/keys"})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			p, _ := New(Options{Allow: al, Recorder: &auditLogRecorder{l: l, ahead: ahead}, AllowUncredentialed: true})
			defer p.Close()
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			go p.Serve(ln)
			u, _ := url.Parse("http://" + ln.Addr().String())
			run(b, &http.Transport{Proxy: http.ProxyURL(u)})
		})
	}
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
