package ipc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// envDial makes the test binary, re-executed, act as a client of the
// socket it names (see TestPeerOfAnotherUserIsRefused).
const envDial = "FLUFFY__IPC_TEST_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(envDial); path != "" {
		// The client refuses a server of another user...
		_, err := Dial(context.Background(), path, ClientOptions{Name: "intruder"})
		fmt.Println("dial:", err)
		// ...and the server refuses a client of another user.
		nc, err := net.Dial("unix", path)
		if err != nil {
			fmt.Println("connect:", err)
			os.Exit(3)
		}
		_, _ = nc.Write(frame(`{"type":"hello","hello":{"min":1,"max":1}}`))
		p, err := ReadFrame(nc, 0)
		fmt.Printf("server: %s %v\n", p, err)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type echoParams struct {
	Text string `json:"text"`
}

// testMux registers the methods the tests call.
func testMux(t testing.TB, started chan<- string) *Mux {
	mux := NewMux()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mux.Handle("echo", func(_ context.Context, r *Request) (any, error) {
		var p echoParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		return p, nil
	}))
	must(mux.Handle("block", func(ctx context.Context, r *Request) (any, error) {
		if started != nil {
			started <- r.Method
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	must(mux.Handle("sleep", func(ctx context.Context, r *Request) (any, error) {
		if started != nil {
			started <- r.Method
		}
		time.Sleep(50 * time.Millisecond)
		return "slept", nil
	}))
	must(mux.Handle("fail", func(context.Context, *Request) (any, error) {
		return nil, errors.New("it broke")
	}))
	must(mux.Handle("refuse", func(context.Context, *Request) (any, error) {
		return nil, Errorf(CodeUnavailable, "not now")
	}))
	must(mux.Handle("boom", func(context.Context, *Request) (any, error) {
		panic("handler bug")
	}))
	must(mux.Handle("big", func(context.Context, *Request) (any, error) {
		return strings.Repeat("z", 2000), nil
	}))
	must(mux.Handle("whoami", func(_ context.Context, r *Request) (any, error) {
		return r.Peer, nil
	}))
	must(mux.Handle("notify.me", func(_ context.Context, r *Request) (any, error) {
		return r.Peer.Notify("private.note", "for you")
	}))
	return mux
}

type testServer struct {
	*Server
	path string
	errc chan error
}

func startServer(t *testing.T, opts ServerOptions) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startServerAt(t, filepath.Join(dir, "run", SocketName), opts)
}

func startServerAt(t *testing.T, path string, opts ServerOptions) *testServer {
	t.Helper()
	if opts.Mux == nil {
		opts.Mux = testMux(t, nil)
	}
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, path: path, errc: make(chan error, 1)}
	go func() { ts.errc <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-ts.errc
	})
	return ts
}

func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(t.Context(), path, ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCalls(t *testing.T) {
	ts := startServer(t, ServerOptions{Name: "kernel-test"})
	c := dial(t, ts.path)
	if got := c.Server(); got.Version != Protocol || got.Name != "kernel-test" || got.PID != os.Getpid() {
		t.Fatalf("server hello = %+v", got)
	}
	if c.ServerCred().PID != int32(os.Getpid()) {
		t.Fatalf("server cred = %+v", c.ServerCred())
	}
	ctx := t.Context()
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var out echoParams
	if err := c.Call(ctx, "echo", echoParams{Text: "hi"}, &out); err != nil || out.Text != "hi" {
		t.Fatalf("echo = %+v, %v", out, err)
	}
	var peer Peer
	if err := c.Call(ctx, "whoami", nil, &peer); err != nil || peer.Name != "test" || peer.Cred.UID != uint32(os.Geteuid()) || peer.Version != Protocol {
		t.Fatalf("whoami = %+v, %v", peer, err)
	}
	errCases := []struct {
		method string
		params any
		want   *Error
		msg    string
	}{
		{"nosuch", nil, ErrUnknownMethod, `no method "nosuch"`},
		{"echo", map[string]any{"text": "x", "extra": 1}, ErrInvalidParams, "unknown field"},
		{"echo", []int{1}, ErrInvalidParams, "echo"},
		{"fail", nil, &Error{Code: CodeInternal}, "it broke"},
		{"refuse", nil, &Error{Code: CodeUnavailable}, "not now"},
		{"boom", nil, &Error{Code: CodeInternal}, "panicked"},
		{"subscribe", SubscribeParams{Topics: []string{"Bad Topic"}}, ErrInvalidParams, "topic pattern"},
	}
	for _, tc := range errCases {
		err := c.Call(ctx, tc.method, tc.params, nil)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want code %s containing %q", tc.method, err, tc.want.Code, tc.msg)
		}
	}
	// The connection survives every error above.
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMuxRegistration(t *testing.T) {
	m := NewMux()
	h := func(context.Context, *Request) (any, error) { return nil, nil }
	if err := m.Handle("session.create", h); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		h    Handler
	}{{"session.create", h}, {"ping", h}, {"Bad", h}, {"", h}, {"x.", h}, {"ok", nil}} {
		if err := m.Handle(bad.name, bad.h); err == nil {
			t.Errorf("Handle(%q) accepted", bad.name)
		}
	}
	if got := strings.Join(m.Methods(), ","); got != "ping,session.create,subscribe,unsubscribe" {
		t.Fatalf("Methods() = %s", got)
	}
	if _, err := NewServer(ServerOptions{}); err == nil {
		t.Fatal("NewServer without a Mux accepted")
	}
}

func TestVersionMismatch(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	_, err := Dial(t.Context(), ts.path, ClientOptions{MinVersion: Protocol + 1, MaxVersion: Protocol + 2})
	if !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("err = %v, want a version mismatch", err)
	}
	want := fmt.Sprintf("client speaks protocol %d..%d, this kernel speaks %d..%d", Protocol+1, Protocol+2, MinProtocol, Protocol)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to say %q", err, want)
	}
}

// rawConn speaks the wire by hand, for malformed input.
type rawConn struct {
	t *testing.T
	net.Conn
}

func rawDial(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t, c}
}

func (r *rawConn) send(b []byte) {
	r.t.Helper()
	if _, err := r.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) hello() {
	r.t.Helper()
	r.send(frame(`{"type":"hello","hello":{"min":1,"max":1}}`))
	m := r.recv()
	if m == nil || m.Type != TypeHello {
		r.t.Fatalf("hello answered with %+v", m)
	}
}

// recv reads one message, or nil at EOF.
func (r *rawConn) recv() *Message {
	r.t.Helper()
	p, err := ReadFrame(r, 0)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	m, err := DecodeMessage(p)
	if err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	return m
}

// TestMalformedInput: each bad input gets one final error frame naming the
// problem (or just a close), and the server keeps serving others.
func TestMalformedInput(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxFrame: 4096})
	cases := []struct {
		name       string
		helloFirst bool
		input      []byte
		closeW     bool
		wantCode   string // "" means the server just closes
	}{
		{"oversized frame", true, header(4097), false, CodeFrameTooLarge},
		{"oversized before hello", false, header(0xFFFFFFFF), false, CodeFrameTooLarge},
		{"garbage bytes", true, []byte("GET / HTTP/1.1\r\n\r\n"), false, CodeFrameTooLarge},
		{"not JSON", true, frame(`hello?`), false, CodeInvalidMessage},
		{"unknown type", true, frame(`{"type":"shout"}`), false, CodeInvalidMessage},
		{"request before hello", false, frame(`{"type":"request","id":1,"method":"ping"}`), false, CodeInvalidMessage},
		{"second hello", true, frame(`{"type":"hello","hello":{"min":1}}`), false, CodeInvalidMessage},
		{"client sends an event", true, frame(`{"type":"event","topic":"x"}`), false, CodeInvalidMessage},
		{"empty frame", true, header(0), false, CodeInvalidMessage},
		{"truncated payload", true, append(header(100), `{"type":`...), true, ""},
		{"truncated header", true, []byte{0, 0}, true, ""},
		{"bad hello version", false, frame(`{"type":"hello","hello":{"min":0}}`), false, CodeVersionMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rawDial(t, ts.path)
			if tc.helloFirst {
				r.hello()
			}
			r.send(tc.input)
			if tc.closeW {
				_ = r.Conn.(*net.UnixConn).CloseWrite()
			}
			m := r.recv()
			if tc.wantCode == "" {
				if m != nil {
					t.Fatalf("got %+v, want the server to close", m)
				}
				return
			}
			if m == nil || m.Type != TypeError || m.Error.Code != tc.wantCode {
				t.Fatalf("got %+v (error %+v), want an error frame %s", m, m.Error, tc.wantCode)
			}
			if m := r.recv(); m != nil {
				t.Fatalf("after the error frame got %+v, want EOF", m)
			}
		})
	}
	if err := dial(t, ts.path).Ping(t.Context()); err != nil {
		t.Fatalf("server no longer serves after malformed input: %v", err)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{HandshakeTimeout: 50 * time.Millisecond})
	r := rawDial(t, ts.path)
	if m := r.recv(); m != nil { // silent peer: closed without a word
		t.Fatalf("got %+v", m)
	}
}

func TestCancel(t *testing.T) {
	started := make(chan string, 1)
	ts := startServer(t, ServerOptions{Mux: testMux(t, started)})
	c := dial(t, ts.path)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "block", nil, nil) }()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The handler saw the cancel and the connection is fine.
	if err := c.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "handler canceled", func() bool {
		var p Peer
		_ = c.Call(t.Context(), "whoami", nil, &p)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for k := range ts.conns {
			k.mu.Lock()
			n := len(k.inflight)
			k.mu.Unlock()
			if n > 0 {
				return false
			}
		}
		return true
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInFlightLimit(t *testing.T) {
	started := make(chan string, 4)
	ts := startServer(t, ServerOptions{Mux: testMux(t, started), MaxInFlight: 1})
	c := dial(t, ts.path)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "block", nil, nil) }()
	<-started
	err := c.Call(t.Context(), "echo", echoParams{Text: "x"}, nil)
	if !errors.Is(err, &Error{Code: CodeUnavailable}) || !strings.Contains(err.Error(), "1 requests already in flight") {
		t.Fatalf("over the limit: %v", err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("ping over the limit: %v", err)
	}
	cancel() // the cancel gets through although the connection is at its limit
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	waitFor(t, "slot freed", func() bool {
		return c.Call(t.Context(), "echo", echoParams{Text: "y"}, nil) == nil
	})
}

func TestDuplicateID(t *testing.T) {
	started := make(chan string, 1)
	ts := startServer(t, ServerOptions{Mux: testMux(t, started)})
	r := rawDial(t, ts.path)
	r.hello()
	r.send(frame(`{"type":"request","id":7,"method":"block"}`))
	<-started
	r.send(frame(`{"type":"request","id":7,"method":"block"}`))
	if m := r.recv(); m == nil || m.Type != TypeError || m.Error.Code != CodeInvalidMessage || !strings.Contains(m.Error.Message, "already in flight") {
		t.Fatalf("duplicate id answered %+v", m)
	}
	// Cancels of unknown ids are ignored on a live connection.
	r2 := rawDial(t, ts.path)
	r2.hello()
	r2.send(frame(`{"type":"cancel","id":99}`))
	r2.send(frame(`{"type":"request","id":1,"method":"ping"}`))
	if m := r2.recv(); m == nil || m.Type != TypeResponse || m.ID != 1 {
		t.Fatalf("ping after a stray cancel: %+v", m)
	}
}

func TestConcurrentRequests(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	clients := []*Client{dial(t, ts.path), dial(t, ts.path), dial(t, ts.path)}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 30 {
		c := clients[g%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				want := fmt.Sprintf("g%d-%d", g, i)
				var out echoParams
				if err := c.Call(t.Context(), "echo", echoParams{Text: want}, &out); err != nil {
					errs <- err
					return
				}
				if out.Text != want {
					errs <- fmt.Errorf("got %q, want %q", out.Text, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEvents(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	a, b := dial(t, ts.path), dial(t, ts.path)
	ctx := t.Context()
	if err := a.Subscribe(ctx, "session.*"); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(ctx, "audit.entry", "session.output"); err != nil {
		t.Fatal(err)
	}
	publish := func(topic string, want int) {
		t.Helper()
		n, err := ts.Publish(topic, map[string]string{"t": topic})
		if err != nil || n != want {
			t.Fatalf("Publish(%s) = %d, %v; want %d", topic, n, err, want)
		}
	}
	publish("session.output", 2)
	publish("session.state", 1)
	publish("audit.entry", 1)
	publish("other.thing", 0)
	if err := b.Unsubscribe(ctx, "audit.entry"); err != nil {
		t.Fatal(err)
	}
	publish("audit.entry", 0)
	if _, err := ts.Publish("Bad Topic", 1); err == nil {
		t.Fatal("bad topic published")
	}
	next := func(c *Client) string {
		t.Helper()
		select {
		case ev := <-c.Events():
			return ev.Topic + " " + string(ev.Data)
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
			return ""
		}
	}
	for _, want := range []string{`session.output {"t":"session.output"}`, `session.state {"t":"session.state"}`} {
		if got := next(a); got != want {
			t.Fatalf("a got %s, want %s", got, want)
		}
	}
	for _, want := range []string{`session.output {"t":"session.output"}`, `audit.entry {"t":"audit.entry"}`} {
		if got := next(b); got != want {
			t.Fatalf("b got %s, want %s", got, want)
		}
	}
	// A handler pushes to its own peer, subscribed or not.
	var ok bool
	if err := b.Call(ctx, "notify.me", nil, &ok); err != nil || !ok {
		t.Fatalf("notify.me = %v, %v", ok, err)
	}
	if got := next(b); got != `private.note "for you"` {
		t.Fatalf("got %s", got)
	}
}

// TestSlowConsumer: a peer that subscribes and stops reading never blocks
// the server; it is disconnected, and everyone else is still served.
func TestSlowConsumer(t *testing.T) {
	ts := startServer(t, ServerOptions{QueueLen: 8, WriteTimeout: time.Hour})
	r := rawDial(t, ts.path)
	r.hello()
	r.send(frame(`{"type":"request","id":1,"method":"subscribe","params":{"topics":["*"]}}`))
	if m := r.recv(); m == nil || m.Type != TypeResponse {
		t.Fatalf("subscribe answered %+v", m)
	}
	good := dial(t, ts.path)
	big := strings.Repeat("x", 64<<10)
	published := 0
	for {
		n, err := ts.Publish("flood.data", big)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break // the slow peer is gone
		}
		published++
		if published > 100000 {
			t.Fatal("the slow peer was never disconnected")
		}
	}
	waitFor(t, "slow peer removed", func() bool { return ts.Conns() == 1 })
	if err := good.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The slow peer's stream ends (after whatever was already written).
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := ReadFrame(r, 1<<20); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, ErrTruncated) {
				t.Fatalf("slow peer read: %v", err)
			}
			break
		}
	}
}

// TestSlowWriterTimeout: a peer whose queue never fills but whose socket
// does is cut off by WriteTimeout.
func TestSlowWriterTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{QueueLen: 1 << 16, WriteTimeout: 100 * time.Millisecond})
	r := rawDial(t, ts.path)
	r.hello()
	r.send(frame(`{"type":"request","id":1,"method":"subscribe","params":{"topics":["*"]}}`))
	r.recv()
	big := strings.Repeat("y", 64<<10)
	for range 64 { // 4 MiB: well over the socket buffers
		if _, err := ts.Publish("flood.data", big); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "stalled peer removed", func() bool { return ts.Conns() == 0 })
}

type refusals struct {
	mu   sync.Mutex
	seen []Refusal
}

func (r *refusals) RecordRefusal(_ context.Context, x Refusal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, x)
	return nil
}

// TestPeerOfAnotherUserIsRefused runs a client as the unprivileged user
// nobody against a socket whose file permissions were deliberately opened
// up, so that only the SO_PEERCRED check stands between them.
func TestPeerOfAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	dir, err := os.MkdirTemp("", "ipc-uid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rec := &refusals{}
	ts := startServerAt(t, filepath.Join(dir, "run", SocketName), ServerOptions{Refusals: rec})
	// Open every fence but the credential check.
	for _, p := range []string{dir, filepath.Dir(ts.path)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ts.path, 0o666); err != nil {
		t.Fatal(err)
	}
	// A copy of this test binary that nobody can execute.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "client")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, "-test.run=^$")
	cmd.Env = []string{envDial + "=" + ts.path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	for _, want := range []string{
		"ipc: permission_denied: the socket " + ts.path + " is served by uid 0",
		`server: {"type":"error","error":{"code":"permission_denied","message":"peer uid 65534 is not the kernel's uid 0"}} <nil>`,
	} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("client as nobody: err=%v, want %q in output:\n%s", err, want, out)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 2 || rec.seen[0].Peer.UID != 65534 || rec.seen[0].Want != 0 || rec.seen[0].Peer.PID == 0 {
		t.Fatalf("refusals recorded: %+v", rec.seen)
	}
	if ts.Conns() != 0 {
		t.Fatal("the refused peer counts as a connection")
	}
}

func TestGracefulShutdown(t *testing.T) {
	started := make(chan string, 1)
	ts := startServer(t, ServerOptions{Mux: testMux(t, started)})
	c := dial(t, ts.path)
	res := make(chan string, 1)
	go func() {
		var s string
		if err := c.Call(t.Context(), "sleep", nil, &s); err != nil {
			s = err.Error()
		}
		res <- s
	}()
	<-started
	if err := ts.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := <-res; got != "slept" {
		t.Fatalf("in-flight call got %q, want it to finish", got)
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrShuttingDown) {
		t.Fatalf("client err = %v, want shutting_down", c.Err())
	}
	if err := <-ts.errc; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	ts.errc <- nil // for the cleanup
	if _, err := os.Lstat(ts.path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file left behind: %v", err)
	}
}

func TestShutdownDeadlineCancelsHandlers(t *testing.T) {
	started := make(chan string, 1)
	ts := startServer(t, ServerOptions{Mux: testMux(t, started)})
	c := dial(t, ts.path)
	errc := make(chan error, 1)
	go func() { errc <- c.Call(t.Context(), "block", nil, nil) }()
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked call got %v, want ErrClosed", err)
	}
}

// A handler stuck in a system call ignores its canceled context: once
// Shutdown's deadline has passed, Serve returns all the same (after
// abandonGrace), so the kernel can exit on SIGTERM. Before, Serve waited
// for the handler for ever.
func TestShutdownAbandonsStuckHandler(t *testing.T) {
	mux := NewMux()
	started, release := make(chan struct{}), make(chan struct{})
	if err := mux.Handle("stuck", func(context.Context, *Request) (any, error) {
		close(started)
		<-release // deaf to ctx, as a blocking read(2) is
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ServerOptions{Mux: mux})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), SocketName)
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := dial(t, path)
	go func() { _ = c.Call(context.Background(), "stuck", nil, nil) }()
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	close(release) // let the goroutine end before the leak check
}

// TestServerRestart: a server that crashed left its socket file; a new one
// takes over the same path and clients reconnect.
func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SocketName)
	s1, err := NewServer(ServerOptions{Mux: testMux(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s1.Serve(ln) }()
	c1 := dial(t, path)
	if err := c1.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A second server on a live socket is refused.
	if _, err := Listen(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("Listen on a live socket = %v", err)
	}
	s1.shutdownNow()
	<-done
	<-c1.Done()
	if err := c1.Ping(t.Context()); err == nil {
		t.Fatal("ping on a dead connection succeeded")
	}
	// Crash: what a kill -9 leaves, a socket file nobody listens on.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket not in place: %v", err)
	}
	ts := startServerAt(t, path, ServerOptions{})
	c2 := dial(t, ts.path)
	if err := c2.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", SocketName)
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for p, want := range map[string]fs.FileMode{path: 0o600 | fs.ModeSocket, filepath.Dir(path): 0o700 | fs.ModeDir} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("Listen over a regular file = %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal("the regular file was removed")
	}
	long := filepath.Join(dir, strings.Repeat("d", 120), SocketName)
	if _, err := Listen(long); !errors.Is(err, ErrPathTooLong) {
		t.Fatalf("Listen on a long path = %v", err)
	}
	// A group/world-readable directory is tightened.
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	ln2, err := Listen(filepath.Join(open, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()
	if fi, _ := os.Stat(open); fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, want 0700", fi.Mode().Perm())
	}
}

// TestListenerCloseSparesSuccessor: a server closing late must not remove
// the socket of the server that replaced it.
func TestListenerCloseSparesSuccessor(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	a, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil { // as if judged stale
		t.Fatal(err)
	}
	b, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the successor's socket was removed: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	b.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Close left the socket file: %v", err)
	}
}

func TestSocketPath(t *testing.T) {
	run := t.TempDir()
	home := "/home/me/.local/share/fluffy"
	got := SocketPath(run, home)
	if filepath.Dir(got) != filepath.Join(run, "fluffy") || !strings.HasPrefix(filepath.Base(got), "kernel-") {
		t.Fatalf("SocketPath(run) = %s", got)
	}
	if other := SocketPath(run, "/elsewhere"); other == got {
		t.Fatal("two data directories share a socket")
	}
	if again := SocketPath(run, home+"/"); again != got {
		t.Fatalf("unclean home changes the path: %s vs %s", again, got)
	}
	for _, rd := range []string{"", "relative/dir", filepath.Join(run, "missing")} {
		if got := SocketPath(rd, home); got != filepath.Join(home, SocketName) {
			t.Errorf("SocketPath(%q) = %s, want the data directory", rd, got)
		}
	}
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{IdleTimeout: 100 * time.Millisecond})
	c := dial(t, ts.path)
	time.Sleep(300 * time.Millisecond) // a connection keeps it alive
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("server idled out with a client connected: %v", err)
	}
	c.Close()
	if err := <-ts.errc; !errors.Is(err, ErrIdle) {
		t.Fatalf("Serve = %v, want ErrIdle", err)
	}
	ts.errc <- nil
}

func TestCallAfterClose(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	c := dial(t, ts.path)
	c.Close()
	if err := c.Ping(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := <-c.Events(); ok {
		t.Fatal("events open after close")
	}
}

func TestJSONShapes(t *testing.T) {
	b, _ := json.Marshal(&Message{Type: TypeResponse, ID: 7, Error: Errorf(CodeUnknownMethod, "no method %q", "x")})
	if want := `{"type":"response","id":7,"error":{"code":"unknown_method","message":"no method \"x\""}}`; string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}

func TestClientSideLimits(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	c, err := Dial(t.Context(), ts.path, ClientOptions{MaxFrame: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Too large to send: refused locally, nothing sent, the connection lives.
	err = c.Call(t.Context(), "echo", echoParams{Text: strings.Repeat("x", 2048)}, nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized params: %v", err)
	}
	// An already-canceled context sends nothing either.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ping: %v", err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("connection broken by refused calls: %v", err)
	}
	// A response over the client's limit ends the connection.
	if err := c.Call(t.Context(), "big", nil, nil); err == nil {
		t.Fatal("oversized response accepted")
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrFrameTooLarge) {
		t.Fatalf("client err = %v", c.Err())
	}
}

func TestIdleGrace(t *testing.T) {
	ts := startServer(t, ServerOptions{IdleTimeout: 20 * time.Millisecond, IdleGrace: 10 * time.Second})
	time.Sleep(100 * time.Millisecond) // well past IdleTimeout, inside the grace
	c := dial(t, ts.path)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("server left before its first client: %v", err)
	}
	c.Close()
	if err := <-ts.errc; !errors.Is(err, ErrIdle) { // after a client: IdleTimeout
		t.Fatalf("Serve = %v, want ErrIdle", err)
	}
	ts.errc <- nil
}

// TestAnswerBeforeShutdownWins: a handler that starts the server's
// shutdown (the kernel's "shutdown" method) still gets its answer to the
// caller, although the connection ends right after it: the client must
// not report shutting_down for a call that was answered. Repeated, since
// the answer and the end of the connection arrive together.
func TestAnswerBeforeShutdownWins(t *testing.T) {
	for i := range 100 {
		mux := NewMux()
		var srv *testServer
		if err := mux.Handle("bye", func(context.Context, *Request) (any, error) {
			go func() { _ = srv.Shutdown(context.Background()) }()
			return "bye", nil
		}); err != nil {
			t.Fatal(err)
		}
		srv = startServer(t, ServerOptions{Mux: mux})
		c := dial(t, srv.path)
		var got string
		if err := c.Call(t.Context(), "bye", nil, &got); err != nil || got != "bye" {
			t.Fatalf("call %d: %q, %v; want the answer", i, got, err)
		}
		<-c.Done()
	}
}
