package netproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// TestAdversarial is the table of requests a sandbox might use to get out.
// No case sends traffic anywhere but 127.0.0.1: names resolve through a
// fake resolver, and refused addresses are never dialled.
func TestAdversarial(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer up.Close()
	p := port(t, up.URL)
	res := fakeResolver{
		"api.example.com":       {"127.0.0.1"}, // allowed through AllowAddrs below
		"loop.example.com":      {"127.0.0.1"},
		"v6loop.example.com":    {"::1"},
		"mapped.example.com":    {"::ffff:127.0.0.1"},
		"meta.example.com":      {"169.254.169.254"},
		"meta6.example.com":     {"fd00:ec2::254"},
		"ten.example.com":       {"10.1.2.3"},
		"lan.example.com":       {"192.168.0.10", "172.16.5.5"},
		"nat64.example.com":     {"64:ff9b::a9fe:a9fe"},
		"zero.example.com":      {"0.0.0.0"},
		"cgnat.example.com":     {"100.100.100.200"},
		"linklocal.example.com": {"169.254.10.10"},
	}
	rules := []string{
		"127.0.0.1:" + p, // the test upstream, by IP: explicitly allowed
		"*.example.com:" + p,
		"*.example.com", // default ports only
		"tls.example.com:443",
	}
	// api.example.com resolves to a loopback address allowed only for
	// this test through AllowAddrs; the other example.com names resolve
	// to addresses that stay refused.
	e := startProxy(t, Options{Resolver: res, AllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, rules...)
	e2 := startProxy(t, Options{Resolver: res}, rules...)

	tests := []struct {
		name   string
		env    *proxyEnv
		req    string
		status int
		rule   string // want Record.Rule
	}{
		{"allowed IP literal", e2, "GET http://127.0.0.1:%P/x HTTP/1.1\r\nHost: 127.0.0.1:%P\r\n\r\n", 200, "127.0.0.1:%P"},
		{"allowed name via AllowAddrs", e, "GET http://api.example.com:%P/ HTTP/1.1\r\nHost: api.example.com:%P\r\n\r\n", 200, "*.example.com:%P"},
		{"mapped IPv6 spelling of an allowed IP", e2, "GET http://[::ffff:127.0.0.1]:%P/ HTTP/1.1\r\n\r\n", 200, "127.0.0.1:%P"},
		{"host not on the list", e2, "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 403, "not-allowed"},
		{"allowed host, other port", e2, "GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"private IP literal", e2, "GET http://10.0.0.1/ HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"metadata IP literal", e2, "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"IPv6 loopback literal", e2, "GET http://[::1]:%P/ HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"name resolving to 127.0.0.1", e2, "GET http://loop.example.com:%P/ HTTP/1.1\r\n\r\n", 403, "address:loopback"},
		{"name resolving to 127.0.0.1 (AllowAddrs does not reach other names' rules)", e2, "GET http://api.example.com:%P/ HTTP/1.1\r\n\r\n", 403, "address:loopback"},
		{"name resolving to ::1", e2, "GET http://v6loop.example.com/ HTTP/1.1\r\n\r\n", 403, "address:loopback"},
		{"name resolving to ::ffff:127.0.0.1", e2, "GET http://mapped.example.com/ HTTP/1.1\r\n\r\n", 403, "address:loopback"},
		{"name resolving to metadata", e, "GET http://meta.example.com/ HTTP/1.1\r\n\r\n", 403, "address:metadata"},
		{"name resolving to IPv6 metadata", e, "GET http://meta6.example.com/ HTTP/1.1\r\n\r\n", 403, "address:metadata"},
		{"name resolving to 10.x", e, "GET http://ten.example.com/ HTTP/1.1\r\n\r\n", 403, "address:private"},
		{"name resolving to several private", e, "GET http://lan.example.com/ HTTP/1.1\r\n\r\n", 403, "address:private"},
		{"name resolving to NAT64 metadata", e, "GET http://nat64.example.com/ HTTP/1.1\r\n\r\n", 403, "address:metadata (via NAT64)"},
		{"name resolving to 0.0.0.0", e, "GET http://zero.example.com/ HTTP/1.1\r\n\r\n", 403, "address:unspecified"},
		{"name resolving to CGNAT metadata", e, "GET http://cgnat.example.com/ HTTP/1.1\r\n\r\n", 403, "address:shared (CGNAT)"},
		{"name resolving to link-local", e, "GET http://linklocal.example.com/ HTTP/1.1\r\n\r\n", 403, "address:link-local"},
		{"decimal IP", e2, "GET http://2130706433:%P/ HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"octal IP", e2, "GET http://0177.0.0.1:%P/ HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"hex IP", e2, "GET http://0x7f.0.0.1:%P/ HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"short IP", e2, "GET http://127.1:%P/ HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"IPv6 zone", e2, "GET http://[fe80::1%25eth0]:%P/ HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"origin-form", e2, "GET / HTTP/1.1\r\nHost: 127.0.0.1:%P\r\n\r\n", 400, "origin-form"},
		{"https absolute-form", e2, "GET https://127.0.0.1:%P/ HTTP/1.1\r\n\r\n", 400, "scheme"},
		{"Host header names another host", e2, "GET http://127.0.0.1:%P/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 400, "host-mismatch"},
		{"Host header names another port", e2, "GET http://127.0.0.1:%P/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", 400, "host-mismatch"},
		{"two Host headers", e2, "GET http://127.0.0.1:%P/ HTTP/1.1\r\nHost: 127.0.0.1:%P\r\nHost: evil.test\r\n\r\n", 400, "bad-request"},
		{"userinfo that looks like the allowed host", e2, "GET http://127.0.0.1:%P@evil.test/ HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"CL and TE together", e2, "POST http://127.0.0.1:%P/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad-request"},
		{"CONNECT allowed name, refused address", e2, "CONNECT meta.example.com:443 HTTP/1.1\r\nHost: meta.example.com:443\r\n\r\n", 403, "address:metadata"},
		{"CONNECT to a port not allowed", e2, "CONNECT tls.example.com:22 HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"CONNECT to a private literal", e2, "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n", 403, "not-allowed"},
		{"CONNECT to a decimal IP", e2, "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"CONNECT without port", e2, "CONNECT tls.example.com HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"CONNECT with a path", e2, "CONNECT /rpc HTTP/1.1\r\n\r\n", 400, "bad-request"},
		{"CONNECT Host mismatch", e2, "CONNECT 127.0.0.1:%P HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 400, "host-mismatch"},
		{"CONNECT unknown name", e2, "CONNECT nowhere.example.com:443 HTTP/1.1\r\n\r\n", 502, "*.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := strings.ReplaceAll(tt.req, "%P", p)
			before := len(tt.env.rec.records())
			hitsBefore := hits.Load()
			resp, body := tt.env.raw(t, req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tt.status, body)
			}
			rec := tt.env.rec.wait(t, before+1)[before]
			wantRule := strings.ReplaceAll(tt.rule, "%P", p)
			if rec.Rule != wantRule {
				t.Errorf("audit rule %q, want %q (%+v)", rec.Rule, wantRule, rec)
			}
			if rec.Status != tt.status || rec.Sandbox != "sb-1" || rec.Session != "sess-1" {
				t.Errorf("audit record %+v", rec)
			}
			if tt.status == 200 {
				if rec.Decision != Allowed || rec.Addr == "" || rec.BytesDown == 0 {
					t.Errorf("allowed request audited as %+v", rec)
				}
				return
			}
			if tt.status < 500 {
				if rec.Decision != Denied || rec.Addr != "" {
					t.Errorf("refused request audited as %+v", rec)
				}
				if hits.Load() != hitsBefore {
					t.Error("a refused request reached the upstream")
				}
				mustContain(t, body, fmt.Sprintf("refused by rule %q", rec.Rule))
				if got := resp.Header.Get("X-Fluffy-Egress-Rule"); got != rec.Rule {
					t.Errorf("X-Fluffy-Egress-Rule %q, want %q", got, rec.Rule)
				}
			}
		})
	}
}

func TestHTTPForwarding(t *testing.T) {
	var got struct {
		sync.Mutex
		host, proxyAuth, custom, conn string
		body                          string
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Lock()
		got.host, got.proxyAuth, got.custom = r.Host, r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Custom")
		got.conn, got.body = r.Header.Get("X-Hop"), string(b)
		got.Unlock()
		w.Header().Set("X-Reply", "yes")
		w.Header().Set("Connection", "X-Secret")
		w.Header().Set("X-Secret", "hop")
		io.WriteString(w, strings.Repeat("r", 5000))
	}))
	defer up.Close()
	e := startProxy(t, Options{}, "127.0.0.1:"+port(t, up.URL))
	c := e.client(t, nil)
	for i := range 3 { // keep-alive: several requests on one connection
		req, _ := http.NewRequest("POST", up.URL+"/path?q=1", strings.NewReader("hello upstream"))
		req.Header.Set("X-Custom", "kept")
		req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "dropped")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) != 5000 || resp.Header.Get("X-Reply") != "yes" || resp.Header.Get("X-Secret") != "" {
			t.Fatalf("request %d: %d %d bytes %v", i, resp.StatusCode, len(b), resp.Header)
		}
	}
	got.Lock()
	if got.host != "127.0.0.1:"+port(t, up.URL) || got.proxyAuth != "" || got.custom != "kept" || got.conn != "" || got.body != "hello upstream" {
		t.Errorf("upstream saw host %q proxy-auth %q custom %q hop %q body %q", got.host, got.proxyAuth, got.custom, got.conn, got.body)
	}
	got.Unlock()
	recs := e.rec.wait(t, 3)
	for _, r := range recs {
		if r.Method != "POST" || r.Host != "127.0.0.1" || r.Decision != Allowed || r.BytesUp != 14 || r.BytesDown != 5000 ||
			r.Status != 200 || r.Err != "" || r.Addr != up.Listener.Addr().String() || r.Time.IsZero() {
			t.Errorf("record %+v", r)
		}
	}
}

func TestConnectTunnel(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "tls ok %d", len(b))
	}))
	defer up.Close()
	e := startProxy(t, Options{}, "127.0.0.1:"+port(t, up.URL))
	c := e.client(t, up.Client().Transport.(*http.Transport))
	resp, err := c.Post(up.URL, "text/plain", strings.NewReader("secret body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "tls ok 11" {
		t.Fatalf("body %q", b)
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	r := e.rec.wait(t, 1)[0]
	if r.Method != "CONNECT" || r.Decision != Allowed || r.Status != 200 || r.BytesUp < 100 || r.BytesDown < 100 || r.Addr == "" {
		t.Errorf("record %+v", r)
	}
}

func TestConnectPipelinedBytes(t *testing.T) {
	// A client may send tunnel bytes right behind the CONNECT request.
	ln := echoServer(t)
	e := startProxy(t, Options{}, ln)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\nping", ln)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
}

// echoServer runs a TCP echo server on 127.0.0.1 and returns its address.
func echoServer(t *testing.T) string {
	t.Helper()
	return tcpServer(t, func(c net.Conn) { io.Copy(c, c) })
}

func tcpServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestUploadLimit(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	e := startProxy(t, Options{Limits: Limits{MaxUpload: 1000}}, "127.0.0.1:"+port(t, up.URL))

	// Declared too large: refused before any upstream contact.
	resp, body := e.raw(t, fmt.Sprintf("POST %s/ HTTP/1.1\r\nContent-Length: 2000\r\n\r\n", up.URL))
	if resp.StatusCode != 413 || hits.Load() != 0 {
		t.Fatalf("status %d hits %d body %q", resp.StatusCode, hits.Load(), body)
	}
	if r := e.rec.wait(t, 1)[0]; r.Rule != "limit:upload" || r.Decision != Denied {
		t.Errorf("record %+v", r)
	}

	// Chunked, so the size shows only while streaming: cut at the limit.
	chunk := strings.Repeat("x", 600)
	resp, _ = e.raw(t, fmt.Sprintf("POST %s/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n%s\r\n258\r\n%s\r\n0\r\n\r\n", up.URL, chunk, chunk))
	if resp.StatusCode != 413 {
		t.Fatalf("chunked upload over the limit: status %d", resp.StatusCode)
	}
	r := e.rec.wait(t, 2)[1]
	if r.Decision != Allowed || r.BytesUp != 1000 || !strings.Contains(r.Err, "limit") {
		t.Errorf("record %+v", r)
	}

	// Exactly at the limit is fine.
	c := e.client(t, nil)
	res, err := c.Post(up.URL, "x", bytes.NewReader(make([]byte, 1000)))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", res, err)
	}
	res.Body.Close()
}

func TestDownloadLimit(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			for range 10 {
				w.Write(make([]byte, 1000))
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", "10000")
		w.Write(make([]byte, 10000))
	}))
	defer up.Close()
	e := startProxy(t, Options{Limits: Limits{MaxDownload: 2500}}, "127.0.0.1:"+port(t, up.URL))
	c := e.client(t, nil)

	resp, err := c.Get(up.URL + "/sized")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Fluffy-Egress-Rule") != "limit:download" {
		t.Fatalf("sized: %d %v", resp.StatusCode, resp.Header)
	}
	if r := e.rec.wait(t, 1)[0]; r.Status != 502 || !strings.Contains(r.Err, "exceeds") {
		t.Errorf("record %+v", r)
	}

	// HEAD of the same large resource moves no body: not refused.
	resp, err = c.Head(up.URL + "/sized")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 10000 {
		t.Fatalf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	e.rec.wait(t, 2)

	resp, err = c.Get(up.URL + "/chunked")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n > 2500 {
		t.Fatalf("chunked download over the limit: read %d bytes, err %v", n, err)
	}
	recs := e.rec.wait(t, 3)
	if r := recs[2]; r.BytesDown != 2500 || !strings.Contains(r.Err, "download cut") {
		t.Errorf("record %+v", r)
	}
}

func TestTunnelLimits(t *testing.T) {
	bulk := tcpServer(t, func(c net.Conn) { c.Write(make([]byte, 100000)); io.Copy(io.Discard, c) })
	sink := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	e := startProxy(t, Options{Limits: Limits{MaxDownload: 3000, MaxUpload: 2000}}, bulk, sink)

	c := dialTunnel(t, e, bulk)
	n, _ := io.Copy(io.Discard, c)
	if n != 3000 {
		t.Errorf("downloaded %d bytes through a 3000-byte tunnel", n)
	}
	r := e.rec.wait(t, 1)[0]
	if r.BytesDown != 3000 || !strings.Contains(r.Err, "download cut") {
		t.Errorf("record %+v", r)
	}

	c = dialTunnel(t, e, sink)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = c.Write(make([]byte, 1000))
		time.Sleep(time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("tunnel still open after the upload limit")
	}
	r = e.rec.wait(t, 2)[1]
	if r.BytesUp != 2000 || !strings.Contains(r.Err, "upload cut") {
		t.Errorf("record %+v", r)
	}
}

// dialTunnel opens a CONNECT tunnel through the proxy.
func dialTunnel(t *testing.T, e *proxyEnv, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return &bufConn{Conn: c, r: br}
}

// bufConn reads through the reader that parsed the CONNECT answer, which
// may hold the first tunnel bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	silent := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	e := startProxy(t, Options{Limits: Limits{
		ResponseHeaderTimeout: 100 * time.Millisecond,
		HeaderTimeout:         150 * time.Millisecond,
		IdleTimeout:           150 * time.Millisecond,
	}}, "127.0.0.1:"+port(t, slow.URL), silent)

	t.Run("slow upstream", func(t *testing.T) {
		resp, _ := e.raw(t, fmt.Sprintf("GET %s/ HTTP/1.1\r\n\r\n", slow.URL))
		if resp.StatusCode != 504 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		r := e.rec.wait(t, 1)[0]
		if r.Status != 504 || !strings.Contains(r.Err, "timeout") {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("slow client", func(t *testing.T) {
		before := len(e.rec.records())
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://127.0.0.1/ HTTP/1.1\r\nX-Slow: ")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("slow client not cut off: %v", err)
		}
		r := e.rec.wait(t, before+1)[before]
		if r.Rule != "limit:header-timeout" || r.Decision != Denied {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("idle tunnel", func(t *testing.T) {
		before := len(e.rec.records())
		c := dialTunnel(t, e, silent)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("idle tunnel not closed")
		}
		r := e.rec.wait(t, before+1)[before]
		if !strings.Contains(r.Err, "idle") {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("idle client connection", func(t *testing.T) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("idle client connection not closed: %v", err)
		}
	})
}

func TestTunnelMaxDuration(t *testing.T) {
	// A tunnel kept busy never idles out, but the time limit still ends it.
	chatty := tcpServer(t, func(c net.Conn) {
		for {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	// The idle timeout is 50 writes long: a loaded machine (CI) has
	// stalled the writer for over 100 ms.
	e := startProxy(t, Options{Limits: Limits{MaxDuration: 1500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond}}, chatty)
	c := dialTunnel(t, e, chatty)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, c)
	if n < 5 {
		t.Errorf("only %d bytes before the tunnel ended: idle timer fired on a busy tunnel?", n)
	}
	if r := e.rec.wait(t, 1)[0]; !strings.Contains(r.Err, "time limit") {
		t.Errorf("record %+v", r)
	}
}

func TestAuditFailureFailsClosed(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	rec := &memRecorder{fail: errors.New("disk full")}
	e := startProxy(t, Options{Recorder: rec}, "127.0.0.1:"+port(t, up.URL))
	// The decision cannot be recorded: nothing reaches the upstream,
	// neither for this request nor for later ones, plain or tunnelled.
	for _, req := range []string{
		fmt.Sprintf("GET %s/ HTTP/1.1\r\n\r\n", up.URL),
		fmt.Sprintf("GET %s/ HTTP/1.1\r\n\r\n", up.URL),
		fmt.Sprintf("CONNECT %s HTTP/1.1\r\n\r\n", strings.TrimPrefix(up.URL, "http://")),
	} {
		resp, body := e.raw(t, req)
		if resp.StatusCode != 503 || hits.Load() != 0 {
			t.Fatalf("%q with a failing audit: %d, %d upstream hits, %q", req, resp.StatusCode, hits.Load(), body)
		}
		mustContain(t, body, `"audit"`)
	}
	if e.p.auditFailure() == nil {
		t.Fatal("recorder failure not latched")
	}
}

func TestControlHookChecksTheConnectAddress(t *testing.T) {
	p, err := New(Options{Recorder: &memRecorder{}, AllowAddrs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	name := Rule{Host: "api.example.com"}
	lit := Rule{IP: netip.MustParseAddr("127.0.0.1"), Port: 8080}
	tests := []struct {
		rule Rule
		port int
		addr string
		ok   bool
	}{
		{name, 443, "93.184.216.34:443", true},
		{name, 443, "93.184.216.34:444", false},
		{name, 443, "127.0.0.1:443", false},
		{name, 443, "[::1]:443", false},
		{name, 443, "[::ffff:127.0.0.1]:443", false},
		{name, 443, "169.254.169.254:443", false},
		{name, 443, "[fe80::1%eth0]:443", false},
		{name, 443, "10.9.1.1:443", true},
		{name, 443, "10.8.1.1:443", false},
		{lit, 8080, "127.0.0.1:8080", true},
		{lit, 8080, "[::ffff:127.0.0.1]:8080", true},
		{lit, 8080, "127.0.0.2:8080", false},
		{name, 443, "not an address", false},
	}
	for _, tt := range tests {
		err := p.control(tt.rule, tt.port)("tcp", tt.addr, nil)
		if (err == nil) != tt.ok {
			t.Errorf("control(%v, %d)(%s) = %v, want ok=%v", tt.rule, tt.port, tt.addr, err, tt.ok)
		}
	}
}

func TestDialSkipsRefusedAddresses(t *testing.T) {
	// A name with a refused and a permitted address connects only to
	// the permitted one.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	res := fakeResolver{"mixed.example.com": {"169.254.169.254", "127.0.0.1"}}
	e := startProxy(t, Options{Resolver: res, AllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		"mixed.example.com:"+port(t, up.URL))
	resp, _ := e.raw(t, fmt.Sprintf("GET http://mixed.example.com:%s/ HTTP/1.1\r\n\r\n", port(t, up.URL)))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if r := e.rec.wait(t, 1)[0]; r.Addr != up.Listener.Addr().String() {
		t.Errorf("dialled %q", r.Addr)
	}
}

// TestConcurrentConnections runs 1,000 clients at once over the unix
// socket against a proxy bounded to 32 connections, then checks nothing
// leaks once it is closed.
func TestConcurrentConnections(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	rec := &memRecorder{}
	al, _ := ParseAllowList([]string{"127.0.0.1:" + port(t, up.URL)})
	p, err := New(Options{Allow: al, Recorder: rec, Limits: Limits{MaxConns: 32}})
	if err != nil {
		t.Fatal(err)
	}
	sock := t.TempDir() + "/egress.sock"
	ln, err := ListenUnix(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()

	const n = 1000
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", sock)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\nConnection: close\r\n\r\n", up.URL)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != "ok" {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("%d %q", resp.StatusCode, b))
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", f, n, firstErr.Load())
	}
	if got := len(rec.wait(t, n)); got != n {
		t.Errorf("%d records for %d requests", got, n)
	}
	p.Close()
	if err := <-served; !errors.Is(err, ErrClosed) {
		t.Errorf("Serve: %v", err)
	}
	up.Close()
}

func TestCloseEndsOpenTunnels(t *testing.T) {
	checkLeaks(t)
	silent := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	e := startProxy(t, Options{}, silent)
	var conns []net.Conn
	for range 5 {
		conns = append(conns, dialTunnel(t, e, silent))
	}
	done := make(chan struct{})
	go func() { e.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end open tunnels")
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("tunnel still open after Close")
		}
		c.Close()
	}
	if got := len(e.rec.wait(t, 5)); got != 5 {
		t.Errorf("%d records", got)
	}
}

func TestNewRequiresRecorder(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a Recorder succeeded")
	}
}

// FuzzServeConn feeds arbitrary client bytes to the proxy. The allow-list
// names only a closed loopback port, so nothing leaves the machine. The
// proxy must answer with HTTP or hang up, never panic or stall.
func FuzzServeConn(f *testing.F) {
	for _, s := range []string{
		"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
		"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET http://a.b/ HTTP/1.1\nHost: a.b\n\n",
		"\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	al, _ := ParseAllowList([]string{"127.0.0.1:1"})
	p, err := New(Options{Allow: al, Recorder: &memRecorder{}, Resolver: fakeResolver{},
		Limits: Limits{HeaderTimeout: 50 * time.Millisecond, IdleTimeout: 50 * time.Millisecond, MaxDuration: time.Second}})
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			p.serveConn(server)
			server.Close()
			close(done)
		}()
		go func() {
			client.Write(in)
		}()
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, _ := io.ReadAll(client)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("serveConn did not return")
		}
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.1 ")) {
			t.Fatalf("answer is not HTTP: %q", out)
		}
	})
}

// TestTrickledBody: a client that announces a body and then stalls is cut
// off at the time limit instead of holding the request open.
func TestTrickledBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer up.Close()
	e := startProxy(t, Options{Limits: Limits{MaxDuration: 300 * time.Millisecond}}, "127.0.0.1:"+port(t, up.URL))
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s/ HTTP/1.1\r\nContent-Length: 1000\r\n\r\nonly ten b", up.URL)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	if resp.StatusCode != 504 {
		t.Errorf("status %d", resp.StatusCode)
	}
	r := e.rec.wait(t, 1)[0]
	if r.BytesUp != 10 || !strings.Contains(r.Err, "timeout") {
		t.Errorf("record %+v", r)
	}
}

// TestPipelinedRequests: each request on a kept-alive connection is judged
// on its own, and a body the upstream did not consume is never read as the
// next request (smuggling).
func TestPipelinedRequests(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	e := startProxy(t, Options{}, "127.0.0.1:"+port(t, up.URL))

	t.Run("allowed then refused", func(t *testing.T) {
		before := len(e.rec.records())
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s/a HTTP/1.1\r\n\r\nGET http://evil.test/ HTTP/1.1\r\n\r\n", up.URL)
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for _, want := range []int{200, 403} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d", resp.StatusCode, want)
			}
		}
		recs := e.rec.wait(t, before+2)[before:]
		if recs[0].Decision != Allowed || recs[1].Decision != Denied || recs[1].Host != "evil.test" {
			t.Errorf("records:\n%s", fmtRecs(recs))
		}
	})
	t.Run("unread body is not a request", func(t *testing.T) {
		// An upstream that answers at once and hangs up without reading
		// the body (without saying "Connection: close").
		early := tcpServer(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			for {
				l, err := br.ReadString('\n')
				if err != nil || l == "\r\n" {
					break
				}
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
		})
		e := startProxy(t, Options{}, early)
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		smuggled := "GET http://smuggled.test/ HTTP/1.1\r\n\r\n"
		// 24 MB: more than the loopback socket buffers between proxy and
		// upstream can absorb, so the body is certainly not all sent.
		body := strings.Repeat(smuggled, 24<<20/len(smuggled))
		go fmt.Fprintf(c, "POST http://%s/early HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", early, len(body), body)
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		// Depending on timing the transport sees the answer or the reset
		// first: both are fine, what follows is what matters.
		if string(b) != "early" && resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
		// The proxy must hang up rather than parse the rest.
		if _, err := http.ReadResponse(br, nil); err == nil {
			t.Fatal("a second response on the connection: the body was read as requests")
		} else if isTimeout(err) {
			t.Fatal("the proxy kept the connection open after an unread body")
		}
		time.Sleep(50 * time.Millisecond)
		for _, r := range e.rec.records() {
			if r.Host == "smuggled.test" {
				t.Fatalf("smuggled request parsed: %+v", r)
			}
		}
	})
}

func TestIPv6Upstream(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "v6 "+r.Host) }))
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	p := port(t, up.URL)
	e := startProxy(t, Options{}, "[::1]:"+p)
	resp, body := e.raw(t, "GET http://[::1]:"+p+"/ HTTP/1.1\r\nHost: [::1]:"+p+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "v6 [::1]:"+p {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if r := e.rec.wait(t, 1)[0]; r.Host != "::1" || r.Addr != "[::1]:"+p || r.Rule != "[::1]:"+p {
		t.Errorf("record %+v", r)
	}
	// The same address spelled differently is the same rule; another
	// loopback address is not.
	resp, _ = e.raw(t, "GET http://[0:0:0:0:0:0:0:1]:"+p+"/ HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("long form: %d", resp.StatusCode)
	}
	resp, _ = e.raw(t, "GET http://127.0.0.1:"+p+"/ HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("IPv4 loopback under an IPv6 rule: %d", resp.StatusCode)
	}
}

// TestMaxConnsBounds: connections past MaxConns wait, unanswered, until a
// slot frees up.
func TestMaxConnsBounds(t *testing.T) {
	silent := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	e := startProxy(t, Options{Limits: Limits{MaxConns: 2}}, silent)
	a := dialTunnel(t, e, silent)
	dialTunnel(t, e, silent)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", silent)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := br.Peek(1); err == nil {
		t.Fatal("a third connection was served with MaxConns 2")
	}
	a.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a slot freed: %v %v", resp, err)
	}
}

func TestPeekHostHeaders(t *testing.T) {
	tests := []struct {
		in    string
		hosts []string
		bad   bool
	}{
		{in: "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nBODY", hosts: []string{"a"}},
		{in: "GET http://a/ HTTP/1.1\nHost: a\n\nHost: body", hosts: []string{"a"}},
		{in: "GET http://a/ HTTP/1.1\r\nHost: a\n\r\nHost: b\r\n\r\n", hosts: []string{"a"}},
		{in: "GET http://a/ HTTP/1.1\r\n\r\nHost: b\r\n\r\n", hosts: nil},
		{in: "GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", hosts: []string{"a", "b"}},
		{in: "POST http://a/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", bad: true},
		{in: "GET http://a/ HTTP/1.1\r\nX: " + strings.Repeat("x", 5000) + "\r\n\r\n", bad: true},
		{in: "GET http://a/ HTTP/1.1\r\nHost: a\r\n", bad: true}, // EOF before the end
	}
	for _, tt := range tests {
		// A reader that hands out one byte at a time, like a trickling client.
		br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(tt.in)), 4096)
		hosts, err := peekHostHeaders(br)
		if (err != nil) != tt.bad {
			t.Errorf("%q: error %v, want bad=%v", tt.in, err, tt.bad)
			continue
		}
		if !tt.bad && strings.Join(hosts, ",") != strings.Join(tt.hosts, ",") {
			t.Errorf("%q: hosts %q, want %q", tt.in, hosts, tt.hosts)
		}
		if !tt.bad && br.Buffered() == 0 {
			t.Errorf("%q: peek consumed the request", tt.in)
		}
	}
}

// flakyListener fails its first Accept calls the way a process out of
// descriptors does.
type flakyListener struct {
	net.Listener
	fails atomic.Int64
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

func TestServeSurvivesAcceptErrors(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	al, _ := ParseAllowList([]string{"127.0.0.1:" + port(t, up.URL)})
	p, err := New(Options{Allow: al, Recorder: &memRecorder{}, AllowUncredentialed: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	served := make(chan error, 1)
	go func() { served <- p.Serve(fl) }()
	e := &proxyEnv{p: p, addr: ln.Addr().String()}
	if resp, body := e.raw(t, fmt.Sprintf("GET %s/ HTTP/1.1\r\n\r\n", up.URL)); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	p.Close()
	if err := <-served; !errors.Is(err, ErrClosed) {
		t.Errorf("Serve: %v", err)
	}
}
