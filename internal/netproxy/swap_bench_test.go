package netproxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// BenchmarkSwap measures one small GET with a placeholder in its
// Authorization header through the proxy on TCP loopback, in-memory
// recorder: plain HTTP without and with swapping, and HTTPS through an
// opaque tunnel against TLS the proxy terminates to swap (keep-alive, and
// a new connection per request, where the proxy's two handshakes show).
func BenchmarkSwap(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	plain := httptest.NewServer(h)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	php, thp := strings.TrimPrefix(plain.URL, "http://"), strings.TrimPrefix(tlsSrv.URL, "https://")
	al, _ := ParseAllowList([]string{php, thp})
	upstream := x509.NewCertPool()
	upstream.AddCert(tlsSrv.Certificate())

	serve := func(b *testing.B, swaps []Swap) (*Proxy, *url.URL) {
		p, err := New(Options{Allow: al, Recorder: &memRecorder{}, AllowUncredentialed: true, Swaps: swaps, UpstreamRoots: upstream})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go p.Serve(ln)
		u, _ := url.Parse("http://" + ln.Addr().String())
		return p, u
	}
	run := func(b *testing.B, tr *http.Transport, target string) {
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		req, _ := http.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			resp, err := c.Do(req)
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
	b.Run("http", func(b *testing.B) {
		_, u := serve(b, nil)
		run(b, &http.Transport{Proxy: http.ProxyURL(u)}, plain.URL)
	})
	b.Run("http-swap", func(b *testing.B) {
		_, u := serve(b, []Swap{testSwap(php)})
		run(b, &http.Transport{Proxy: http.ProxyURL(u)}, plain.URL)
	})
	for _, keep := range []bool{true, false} {
		suffix := ""
		if !keep {
			suffix = "-new-conn"
		}
		b.Run("https-tunnel"+suffix, func(b *testing.B) {
			_, u := serve(b, nil)
			run(b, &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: upstream}}, tlsSrv.URL)
		})
		b.Run("https-swap"+suffix, func(b *testing.B) {
			sw := testSwap(thp)
			sw.TLS = true
			p, u := serve(b, []Swap{sw})
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(p.CACert())
			run(b, &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: roots}}, tlsSrv.URL)
		})
	}
}
