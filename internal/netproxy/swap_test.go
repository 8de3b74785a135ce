package netproxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	testPlaceholder = "fluffy-secret-T3stPlaceh0lder"
	testValue       = "sk-live-0123456789abcdef"
)

// seen is an upstream that keeps every request it got (headers, URL,
// body) and answers "ok" without echoing any of it.
type seen struct {
	mu   sync.Mutex
	reqs []string
}

func (s *seen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var h bytes.Buffer
	r.Header.Write(&h)
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Method+" "+r.URL.RequestURI()+"\n"+h.String()+"\n"+string(b))
	s.mu.Unlock()
	io.WriteString(w, "ok")
}

func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

func testSwap(hosts ...string) Swap {
	return Swap{Placeholder: testPlaceholder, Value: []byte(testValue), Hosts: hosts, Name: "secret://env/API_KEY"}
}

// TestSwapHTTP: a placeholder in headers, the query, Basic credentials
// and the body reaches the bound host as the value; the client's answer
// carries no value, and the audit names the secret, never its value.
func TestSwapHTTP(t *testing.T) {
	api := &seen{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	e := startProxy(t, Options{Swaps: []Swap{testSwap(hp)}}, hp)
	c := e.client(t, nil)

	req, _ := http.NewRequest("POST", srv.URL+"/v1/"+testPlaceholder+"?key="+testPlaceholder+"&x=1", strings.NewReader(`{"token":"`+testPlaceholder+`"}`))
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	req.Header.Set("X-Api-Key", testPlaceholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/basic", nil)
	req.SetBasicAuth("user", testPlaceholder)
	if resp, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	got := api.all()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	for _, want := range []string{
		"POST /v1/" + testValue + "?key=" + testValue + "&x=1\n",
		"Authorization: Bearer " + testValue + "\r\n",
		"X-Api-Key: " + testValue + "\r\n",
		`{"token":"` + testValue + `"}`,
	} {
		mustContain(t, got[0], want)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth("user", testValue)
	mustContain(t, got[1], "Authorization: "+r.Header.Get("Authorization"))
	for _, g := range got {
		if strings.Contains(g, testPlaceholder) {
			t.Errorf("the upstream saw the placeholder:\n%s", g)
		}
	}
	recs := e.rec.wait(t, 2)
	for _, r := range recs {
		if r.Decision != Allowed || len(r.Secrets) != 1 || r.Secrets[0] != "secret://env/API_KEY" {
			t.Errorf("record %+v", r)
		}
	}
	for _, r := range e.rec.every() {
		if strings.Contains(fmtRecs([]Record{r}), testValue) {
			t.Errorf("a record holds the value: %+v", r)
		}
	}
}

// TestSwapUnboundRefused: the placeholder sent to an allowed host the
// secret is not bound to is refused (403 naming the rule) and audited,
// wherever it is in the request; nothing reaches that host.
func TestSwapUnboundRefused(t *testing.T) {
	bound := httptest.NewServer(&seen{})
	defer bound.Close()
	other := &seen{}
	osrv := httptest.NewServer(other)
	defer osrv.Close()
	bhp, ohp := strings.TrimPrefix(bound.URL, "http://"), strings.TrimPrefix(osrv.URL, "http://")
	e := startProxy(t, Options{Swaps: []Swap{testSwap(bhp)}}, bhp, ohp)
	c := e.client(t, nil)
	cases := map[string]func() *http.Request{
		"header": func() *http.Request {
			r, _ := http.NewRequest("GET", osrv.URL+"/", nil)
			r.Header.Set("Authorization", "Bearer "+testPlaceholder)
			return r
		},
		"query": func() *http.Request { r, _ := http.NewRequest("GET", osrv.URL+"/?k="+testPlaceholder, nil); return r },
		"path":  func() *http.Request { r, _ := http.NewRequest("GET", osrv.URL+"/"+testPlaceholder, nil); return r },
		"body": func() *http.Request {
			r, _ := http.NewRequest("POST", osrv.URL+"/", strings.NewReader("a="+testPlaceholder))
			return r
		},
		"basic": func() *http.Request {
			r, _ := http.NewRequest("GET", osrv.URL+"/", nil)
			r.SetBasicAuth(testPlaceholder, "")
			return r
		},
	}
	n := 0
	for name, mk := range cases {
		resp, err := c.Do(mk())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n++
		if resp.StatusCode != 403 || resp.Header.Get("X-Fluffy-Egress-Rule") != "secret:unbound" {
			t.Errorf("%s: status %d rule %q", name, resp.StatusCode, resp.Header.Get("X-Fluffy-Egress-Rule"))
		}
		mustContain(t, string(body), "secret://env/API_KEY, which may be sent only to "+bhp)
	}
	if got := other.all(); len(got) != 0 {
		t.Errorf("the unbound host got %d requests: %q", len(got), got)
	}
	for _, r := range e.rec.wait(t, n) {
		if r.Decision != Denied || r.Rule != "secret:unbound" || r.Status != 403 || r.Phase != PhaseOpen {
			t.Errorf("record %+v", r)
		}
	}
}

// TestSwapBodyLimit: a body longer than Limits.SwapBody goes as sent
// (the placeholder, not the value); one within it is swapped.
func TestSwapBodyLimit(t *testing.T) {
	api := &seen{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	e := startProxy(t, Options{Swaps: []Swap{testSwap(hp)}, Limits: Limits{SwapBody: 64}}, hp)
	c := e.client(t, nil)
	short := "k=" + testPlaceholder
	long := short + strings.Repeat("x", 100)
	for _, b := range []string{short, long} {
		resp, err := c.Post(srv.URL+"/", "text/plain", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := api.all()
	if !strings.HasSuffix(got[0], "\nk="+testValue) || !strings.HasSuffix(got[1], "\n"+long) {
		t.Errorf("upstream saw:\n%s\n---\n%s", got[0], got[1])
	}
}

// tlsUpstream is an HTTPS test server and a pool that trusts it.
func tlsUpstream(t *testing.T, h http.Handler) (*httptest.Server, *x509.CertPool) {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

// TestSwapTLS: for a host a TLS swap is bound to, the proxy terminates
// the sandbox's TLS with its own CA, verifies the real server, and swaps
// inside; a TLS host no swap is bound to stays a tunnel, where the client
// sees the server's own certificate.
func TestSwapTLS(t *testing.T) {
	api := &seen{}
	srv, roots := tlsUpstream(t, api)
	other, otherRoots := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tunnelled") }))
	hp, ohp := strings.TrimPrefix(srv.URL, "https://"), strings.TrimPrefix(other.URL, "https://")
	sw := testSwap(hp)
	sw.TLS = true
	e := startProxy(t, Options{Swaps: []Swap{sw}, UpstreamRoots: roots}, hp, ohp)
	ca := e.p.CACert()
	if ca == nil {
		t.Fatal("no CA with a TLS swap")
	}
	// The sandbox trusts the proxy's CA and, for the tunnel, the server.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("CACert is not PEM: %q", ca)
	}
	pool.AddCert(other.Certificate())
	c := e.client(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})

	req, _ := http.NewRequest("GET", srv.URL+"/v1?key="+testPlaceholder, nil)
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; !strings.Contains(iss, "fluffy") {
		t.Errorf("terminated TLS: the sandbox saw a certificate issued by %q", iss)
	}
	got := api.all()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	mustContain(t, got[0], "GET /v1?key="+testValue)
	mustContain(t, got[0], "Authorization: Bearer "+testValue)

	// The tunnelled host: the server's own certificate, untouched.
	resp, err = c.Get(other.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "tunnelled" || !resp.TLS.PeerCertificates[0].Equal(other.Certificate()) {
		t.Errorf("tunnel: body %q, certificate issued by %q", body, resp.TLS.PeerCertificates[0].Issuer)
	}
	if _, err := resp.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: otherRoots}); err != nil {
		t.Errorf("tunnel: %v", err)
	}
	c.Transport.(*http.Transport).CloseIdleConnections()

	var connects, inner int
	for _, r := range e.rec.wait(t, 3) {
		switch {
		case r.Method == "CONNECT" && r.Host == "127.0.0.1" && strconv.Itoa(r.Port) == port(t, hp):
			connects++
			if !r.TLS || r.BytesUp == 0 {
				t.Errorf("terminated CONNECT record %+v", r)
			}
		case r.Method == "GET":
			inner++
			if !r.TLS || r.Status != 200 || len(r.Secrets) != 1 {
				t.Errorf("inner request record %+v", r)
			}
		case r.Method == "CONNECT":
			if r.TLS {
				t.Errorf("tunnel recorded as terminated: %+v", r)
			}
		}
	}
	if connects != 1 || inner != 1 {
		t.Errorf("records:\n%s", fmtRecs(e.rec.records()))
	}
}

// TestSwapTLSVerifiesUpstream: the proxy checks the bound server's
// certificate as a client would; a server it cannot verify gets nothing.
func TestSwapTLSVerifiesUpstream(t *testing.T) {
	api := &seen{}
	srv, _ := tlsUpstream(t, api)
	hp := strings.TrimPrefix(srv.URL, "https://")
	sw := testSwap(hp)
	sw.TLS = true
	e := startProxy(t, Options{Swaps: []Swap{sw}, UpstreamRoots: x509.NewCertPool()}, hp)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.p.CACert())
	c := e.client(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), "certificate") {
		t.Errorf("status %d body %q", resp.StatusCode, body)
	}
	if n := len(api.all()); n != 0 {
		t.Errorf("an unverified server got %d requests", n)
	}
}

// TestCANameConstraints: the CA vouches only for the hosts of TLS swaps,
// so a sandbox that trusts it trusts it for nothing else.
func TestCANameConstraints(t *testing.T) {
	rules, _ := ParseAllowList([]string{"api.example.com", "*.svc.example.org", "127.0.0.1:8443"})
	a, err := newAuthority(rules.rules)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	for host, ok := range map[string]bool{
		"api.example.com": true, "a.svc.example.org": true, "127.0.0.1": true,
		"evil.example.com": false, "example.com": false, "svc.example.org.evil": false, "127.0.0.2": false, "::1": false,
	} {
		leaf, err := a.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(leaf.Certificate[0])
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
		if (err == nil) != ok {
			t.Errorf("%s: verify error %v, want ok=%v", host, err, ok)
		}
	}
	if block, _ := pem.Decode(a.certPEM); block == nil || !bytes.Equal(block.Bytes, a.cert.Raw) {
		t.Error("certPEM is not the CA certificate")
	}
	if _, err := newAuthority(nil); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadSwaps(t *testing.T) {
	for name, sw := range map[string]Swap{
		"prefix":      {Placeholder: "secret-abc", Value: []byte("v"), Hosts: []string{"a.example"}},
		"empty tail":  {Placeholder: PlaceholderPrefix, Value: []byte("v"), Hosts: []string{"a.example"}},
		"punctuation": {Placeholder: PlaceholderPrefix + "a-b", Value: []byte("v"), Hosts: []string{"a.example"}},
		"no value":    {Placeholder: testPlaceholder, Hosts: []string{"a.example"}},
		"no host":     {Placeholder: testPlaceholder, Value: []byte("v")},
		"bad host":    {Placeholder: testPlaceholder, Value: []byte("v"), Hosts: []string{"*"}},
		"recursive":   {Placeholder: testPlaceholder, Value: []byte(PlaceholderPrefix + "x"), Hosts: []string{"a.example"}},
	} {
		_, err := New(Options{Recorder: &memRecorder{}, Swaps: []Swap{sw}})
		if !errors.Is(err, ErrBadSwap) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSwapHeaderControlChars: a value that would split a header is
// refused, not sent.
func TestSwapHeaderControlChars(t *testing.T) {
	api := &seen{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	sw := testSwap(hp)
	sw.Value = []byte("v\r\nX-Injected: 1")
	e := startProxy(t, Options{Swaps: []Swap{sw}}, hp)
	resp, body := e.raw(t, "GET "+srv.URL+"/ HTTP/1.1\r\nHost: "+hp+"\r\nX-Key: "+testPlaceholder+"\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Fluffy-Egress-Rule") != "secret:value" {
		t.Errorf("status %d body %q", resp.StatusCode, body)
	}
	if len(api.all()) != 0 {
		t.Error("the request went upstream")
	}
}

var placeholderRE = regexp.MustCompile(`fluffy-secret-[A-Za-z0-9]+`)

// FuzzScanPlaceholders compares the scanner with a regular expression
// and swapping with the expression's replacement: the same words are
// found and the same bytes come out.
func FuzzScanPlaceholders(f *testing.F) {
	for _, s := range []string{"", PlaceholderPrefix, testPlaceholder, "Bearer " + testPlaceholder, testPlaceholder + testPlaceholder,
		"fluffy-secret-fluffy-secret-abc", "xfluffy-secret-T3stPlaceh0lderZ", "a&b=" + testPlaceholder + "&" + testPlaceholder + "x"} {
		f.Add([]byte(s))
	}
	set, err := newSwapSet([]Swap{testSwap("a.example"), {Placeholder: "fluffy-secret-b", Value: []byte("B"), Hosts: []string{"b.example"}}})
	if err != nil {
		f.Fatal(err)
	}
	ta, _ := parseTarget("a.example", 80, false)
	f.Fuzz(func(t *testing.T, b []byte) {
		var got [][2]int
		scanPlaceholders(b, func(i, j int) { got = append(got, [2]int{i, j}) })
		want := placeholderRE.FindAllIndex(b, -1)
		if len(got) != len(want) {
			t.Fatalf("%q: scanner found %v, regexp %v", b, got, want)
		}
		for k := range got {
			if got[k][0] != want[k][0] || got[k][1] != want[k][1] {
				t.Fatalf("%q: scanner found %v, regexp %v", b, got, want)
			}
		}
		sw := &swapping{set: set, t: ta}
		out, d := sw.in(b, nil)
		unbound := false
		wantOut := placeholderRE.ReplaceAllFunc(b, func(m []byte) []byte {
			switch string(m) {
			case testPlaceholder:
				return []byte(testValue)
			case "fluffy-secret-b":
				unbound = true
			}
			return m
		})
		if unbound != (d != nil) {
			t.Fatalf("%q: refused %v, want %v", b, d, unbound)
		}
		if d == nil && !bytes.Equal(out, wantOut) {
			t.Fatalf("%q: swapped to %q, want %q", b, out, wantOut)
		}
	})
}

// TestSwapRedactsAnswers: a bound host that echoes the value it was
// sent (in a header, in a body of known or unknown length) gives the
// sandbox the placeholder back, never the value.
func TestSwapRedactsAnswers(t *testing.T) {
	var gotEncoding []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotEncoding = append(gotEncoding, r.Header.Get("Accept-Encoding"))
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo", auth)
		if r.URL.Path == "/chunked" {
			io.WriteString(w, "you sent: ")
			w.(http.Flusher).Flush()
			io.WriteString(w, auth[:10])
			w.(http.Flusher).Flush()
			io.WriteString(w, auth[10:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len("you sent: "+auth)))
		io.WriteString(w, "you sent: "+auth)
	}))
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	e := startProxy(t, Options{Swaps: []Swap{testSwap(hp)}}, hp)
	c := e.client(t, &http.Transport{DisableCompression: true})
	for _, path := range []string{"/length", "/chunked"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "you sent: Bearer "+testPlaceholder || resp.Header.Get("X-Echo") != "Bearer "+testPlaceholder {
			t.Errorf("%s: body %q, X-Echo %q", path, body, resp.Header.Get("X-Echo"))
		}
	}
	for _, enc := range gotEncoding {
		if enc != "" {
			t.Errorf("the bound host was offered encoding %q: its answer could not be read", enc)
		}
	}
}

// FuzzRedactReader compares the streaming redaction, read in small
// pieces, with bytes.ReplaceAll.
func FuzzRedactReader(f *testing.F) {
	f.Add([]byte("abc"), []byte("xxabcxxabab"), uint8(1))
	f.Add([]byte("aab"), []byte("aaab aab aa"), uint8(2))
	f.Add([]byte("v"), []byte(""), uint8(3))
	f.Fuzz(func(t *testing.T, value, in []byte, step uint8) {
		if len(value) == 0 || bytes.Contains([]byte(testPlaceholder), value) {
			return
		}
		z := newRedactReader(&pieceReader{b: in, n: int(step)%7 + 1}, []redaction{{value: value, placeholder: []byte(testPlaceholder)}})
		var got []byte
		buf := make([]byte, int(step)%5+1)
		for {
			n, err := z.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if want := bytes.ReplaceAll(in, value, []byte(testPlaceholder)); !bytes.Equal(got, want) {
			t.Fatalf("value %q in %q: got %q, want %q", value, in, got, want)
		}
	})
}

// pieceReader returns b n bytes at a time.
type pieceReader struct {
	b []byte
	n int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), p.n)], p.b)
	p.b = p.b[k:]
	return k, nil
}

// TestSwapChunkedBody: a body of unknown length is read, swapped and
// sent with its new length.
func TestSwapChunkedBody(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, fmt.Sprintf("%d %v %s", r.ContentLength, r.TransferEncoding, b))
	}))
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	e := startProxy(t, Options{Swaps: []Swap{testSwap(hp)}}, hp)
	// An io.Reader of unknown length: the client sends it chunked.
	body := io.MultiReader(strings.NewReader("k="), strings.NewReader(testPlaceholder))
	resp, err := e.client(t, nil).Post(srv.URL+"/", "text/plain", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := fmt.Sprintf("%d [] k=%s", len("k="+testValue), testValue)
	if len(got) != 1 || got[0] != want {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
}

// TestSwapTLSHostMismatch: inside a connection the proxy terminated, a
// request whose Host names another host than the CONNECT is refused
// before anything is sent.
func TestSwapTLSHostMismatch(t *testing.T) {
	api := &seen{}
	srv, roots := tlsUpstream(t, api)
	hp := strings.TrimPrefix(srv.URL, "https://")
	sw := testSwap(hp)
	sw.TLS = true
	e := startProxy(t, Options{Swaps: []Swap{sw}, UpstreamRoots: roots}, hp)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.p.CACert())
	c := e.client(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Host = "evil.example"
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("X-Fluffy-Egress-Rule") != "host-mismatch" {
		t.Errorf("status %d rule %q", resp.StatusCode, resp.Header.Get("X-Fluffy-Egress-Rule"))
	}
	if n := len(api.all()); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
}

// TestCloseWipesValues: the proxy's copies of the values are zeroed
// when it closes; the caller's are its own.
func TestCloseWipesValues(t *testing.T) {
	mine := []byte(testValue)
	p, err := New(Options{Recorder: &memRecorder{}, Swaps: []Swap{{Placeholder: testPlaceholder, Value: mine, Hosts: []string{"a.example"}}}})
	if err != nil {
		t.Fatal(err)
	}
	kept := p.swaps.by[testPlaceholder].value
	if string(kept) != testValue {
		t.Fatalf("kept %q", kept)
	}
	p.Close()
	if !bytes.Equal(kept, make([]byte, len(testValue))) {
		t.Errorf("after Close the proxy still holds %q", kept)
	}
	if string(mine) != testValue {
		t.Errorf("Close changed the caller's value: %q", mine)
	}
}
