package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// memRecorder is a real Recorder that keeps records in memory: recs has
// each request's final record (its end, or the refusal that was its only
// record), all has every record in order.
type memRecorder struct {
	mu   sync.Mutex
	recs []Record
	all  []Record
	fail error // returned (after storing nothing) when set
	// onOpen, when set, runs as a decision is recorded (before the proxy
	// goes on).
	onOpen func(Record)
}

var _ Recorder = (*memRecorder)(nil)

func (m *memRecorder) RecordEgress(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if r.Phase == PhaseOpen && m.onOpen != nil {
		m.onOpen(r)
	}
	m.all = append(m.all, r)
	if r.Phase == PhaseEnd || r.Decision == Denied {
		m.recs = append(m.recs, r)
	}
	return nil
}

func (m *memRecorder) every() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.all...)
}

func (m *memRecorder) records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.recs...)
}

// wait returns the records once there are at least n (records are written
// as a request ends, which may be just after the client saw its answer).
func (m *memRecorder) wait(t *testing.T, n int) []Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := m.records()
		if len(r) >= n {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d audit records, want %d: %+v", len(r), n, r)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fakeResolver answers from a map; unknown names fail as DNS would.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

type proxyEnv struct {
	p    *Proxy
	addr string // TCP loopback address of the proxy
	rec  *memRecorder
}

// startProxy serves a proxy on 127.0.0.1 for the test's lifetime. allow
// entries are allow-list rules.
func startProxy(t *testing.T, opts Options, allow ...string) *proxyEnv {
	t.Helper()
	al, err := ParseAllowList(allow)
	if err != nil {
		t.Fatal(err)
	}
	opts.Allow = al
	rec, _ := opts.Recorder.(*memRecorder) // nil for another Recorder the test keeps
	if opts.Recorder == nil {
		rec = &memRecorder{}
		opts.Recorder = rec
	}
	if opts.Resolver == nil {
		opts.Resolver = fakeResolver{}
	}
	opts.AllowUncredentialed = true // a TCP listener
	if opts.Sandbox == "" {
		opts.Sandbox, opts.Session = "sb-1", "sess-1"
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return &proxyEnv{p: p, addr: ln.Addr().String(), rec: rec}
}

// client returns an HTTP client that uses the proxy for http and https.
func (e *proxyEnv) client(t *testing.T, base *http.Transport) *http.Client {
	t.Helper()
	u, _ := url.Parse("http://" + e.addr)
	tr := &http.Transport{}
	if base != nil {
		tr = base.Clone()
	}
	tr.Proxy = http.ProxyURL(u)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// raw sends a raw request to the proxy and reads one response.
func (e *proxyEnv) raw(t *testing.T, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", req, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// port returns the port of an "ip:port" or URL.
func port(t *testing.T, s string) string {
	t.Helper()
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		s = u.Host
	}
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkLeaks fails the test if goroutines or file descriptors opened during
// it are still there at cleanup. Register it first so it runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	g0, fd0 := runtime.NumGoroutine(), countFDs(t)
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, fd := runtime.NumGoroutine(), countFDs(t)
			if g <= g0 && fd <= fd0 {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("leak: goroutines %d -> %d, fds %d -> %d %v\n%s", g0, g, fd0, fd, fdNames(), buf)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// countFDs counts open descriptors other than pipes: io.Copy between
// sockets splices through pipes that the runtime pools and frees on its
// own schedule, so they are not leaks of ours.
func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); !strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

func mustContain(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%q does not contain %q", s, sub)
	}
}

func fmtRecs(rs []Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%+v\n", r)
	}
	return b.String()
}

func fdNames() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+l)
	}
	return out
}
