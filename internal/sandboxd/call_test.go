package sandboxd

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCallReplies(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	for _, tc := range []struct {
		name      string
		args      []string
		stdin     string
		want      Reply
		out, errs string
	}{
		{"exit 0", []string{"exit", "0"}, "", Reply{}, "", ""},
		{"exit 1", []string{"exit", "1"}, "", Reply{Code: 1}, "", ""},
		{"exit 3", []string{"exit", "3"}, "", Reply{Code: 3}, "", ""},
		{"exit 130", []string{"exit", "130"}, "", Reply{Code: 130}, "", ""},
		{"exit 255", []string{"exit", "255"}, "", Reply{Code: 255}, "", ""},
		{"exit -1", []string{"exit", "-1"}, "", Reply{Code: -1}, "", ""},
		{"hand over", []string{"handover"}, "", Reply{HandOver: true}, "", ""},
		{"stdout and stderr", []string{"write", "to out\n", "to err\n"}, "", Reply{}, "to out\n", "to err\n"},
		{"echo", []string{"echo"}, "hello\nworld\n", Reply{}, "hello\nworld\n", ""},
		{"echo nothing", []string{"echo"}, "", Reply{}, "", ""},
		{"environment and cwd", []string{"env", "COLOR"}, "", Reply{}, "blue\n/some/dir\n", ""},
		{"unknown", []string{"nope"}, "", Reply{Code: 2}, "", "unknown test command [nope]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStdio(t, strings.NewReader(tc.stdin))
			req := Request{Args: tc.args, Environ: []string{"A=1", "COLOR=blue"}, Cwd: "/some/dir"}
			got, err := call(t.Context(), ClientOptions{Socket: ts.sock}, req, s.io(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("reply %+v, want %+v", got, tc.want)
			}
			if out := readFile(t, s.out); out != tc.out {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
			if errs := readFile(t, s.err); errs != tc.errs {
				t.Errorf("stderr %q, want %q", errs, tc.errs)
			}
		})
	}
}

// TestRequestDelivered: a request larger than a frame (a big environment)
// and odd strings reach the handler exactly.
func TestRequestDelivered(t *testing.T) {
	got := make(chan Request, 1)
	ts := startTestServer(t, func(_ context.Context, c *Incoming) Reply {
		got <- c.Request
		return Reply{}
	}, ServerOptions{})
	big := strings.Repeat("x", 200<<10)
	for _, req := range []Request{
		{Args: []string{"sandbox", "run", "--", "/bin/true"}, Environ: []string{"PATH=/bin"}, Cwd: "/"},
		{Args: []string{"", "ü ✓", "a\nb", "--"}, Environ: nil, Cwd: "/tmp"},
		{Args: []string{"sandbox", "run", "--", "echo", big}, Environ: []string{"BIG=" + big, "B2=" + big, "E="}, Cwd: "/w"},
	} {
		s := newStdio(t, nil)
		if _, err := call(t.Context(), ClientOptions{Socket: ts.sock}, req, s.io(nil)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if !equalRequest(r, req) {
			t.Errorf("handler got %d args, %d env, cwd %q; want %d, %d, %q", len(r.Args), len(r.Environ), r.Cwd, len(req.Args), len(req.Environ), req.Cwd)
		}
	}
}

func equalRequest(a, b Request) bool {
	return strings.Join(a.Args, "\x00") == strings.Join(b.Args, "\x00") && len(a.Args) == len(b.Args) &&
		strings.Join(a.Environ, "\x00") == strings.Join(b.Environ, "\x00") && len(a.Environ) == len(b.Environ) && a.Cwd == b.Cwd
}

// TestStdinPumped: 1 MiB of standard input arrives byte-exact, through a
// pipe as a terminal or a shell would give it.
func TestStdinPumped(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	data := make([]byte, 1<<20+123)
	rand.Read(data)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() {
		// Small, uneven writes.
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 7000)
			pw.Write(rest[:n])
			rest = rest[n:]
		}
		pw.Close()
	}()
	s := newStdio(t, pr)
	r, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"echo"}, Cwd: "/"}, s.io(nil))
	if err != nil || r.Code != 0 {
		t.Fatalf("reply %+v, %v; stderr %q", r, err, readFile(t, s.err))
	}
	if out := readFile(t, s.out); out != string(data) {
		t.Errorf("stdout has %d bytes, equal %v; want the %d bytes of stdin", len(out), bytes.Equal([]byte(out), data), len(data))
	}
}

// countingReader counts the reads made of it.
type countingReader struct {
	mu sync.Mutex
	n  int
}

func (r *countingReader) Read([]byte) (int, error) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	return 0, io.EOF
}

// TestStdinReadOnlyOnDemand: a command that does not read its input never
// makes the client read its standard input (a terminal's next keystrokes
// stay the shell's).
func TestStdinReadOnlyOnDemand(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	in := &countingReader{}
	s := newStdio(t, in)
	if _, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"noread"}, Cwd: "/"}, s.io(nil)); err != nil {
		t.Fatal(err)
	}
	if in.n != 0 {
		t.Errorf("the client read its stdin %d times for a command that reads none", in.n)
	}
}

// TestReceivedFDs: the handler's stdout and stderr are close-on-exec (no
// other call's sandbox inherits them), and the server closes its copies
// when the call ends (a reader of the client's pipe sees EOF).
func TestReceivedFDs(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	cio, pr, pw := pipedStdout(t, nil)
	if _, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"fds"}, Cwd: "/"}, cio); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(pr); done <- b }()
	select {
	case b := <-done:
		if string(b) != "true\ntrue\n" {
			t.Errorf("close-on-exec of stdout, stderr: %q, want true twice", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server still holds the client's stdout after the call")
	}
}

// TestSignalsForwarded: the first SIGINT cancels the call's context with a
// *SignalError; a second one reaches the handler as well; the handler's
// exit code comes back.
func TestSignalsForwarded(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	sigs := make(chan os.Signal, 2)
	cio, pr, pw := pipedStdout(t, sigs)
	type result struct {
		r   Reply
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"signals", "2"}, Cwd: "/"}, cio)
		res <- result{r, err}
	}()
	buf := make([]byte, 100)
	if n, _ := pr.Read(buf); string(buf[:n]) != "ready\n" {
		t.Fatalf("handler said %q", buf[:n])
	}
	sigs <- syscall.SIGINT
	time.Sleep(50 * time.Millisecond)
	sigs <- syscall.SIGTERM
	got := <-res
	pw.Close()
	out, _ := io.ReadAll(pr)
	if got.err != nil || got.r.Code != 130 {
		t.Fatalf("reply %+v, %v", got.r, got.err)
	}
	if want := "SIGINT\nSIGTERM\nsandboxd: client forwarded SIGINT\n"; string(out) != want {
		t.Errorf("handler saw %q, want %q", out, want)
	}
}

// TestCancelCause: a client that goes away mid-call cancels the handler's
// context with ErrDisconnected; a forwarded signal with a *SignalError.
func TestCancelCause(t *testing.T) {
	causes := make(chan error, 1)
	started := make(chan struct{}, 1)
	ts := startTestServer(t, func(ctx context.Context, c *Incoming) Reply {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
		case <-time.After(10 * time.Second):
			causes <- errors.New("not cancelled")
		}
		return Reply{Code: 1}
	}, ServerOptions{})

	t.Run("disconnect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := newStdio(t, nil)
		errc := make(chan error, 1)
		go func() {
			_, err := call(ctx, ClientOptions{Socket: ts.sock}, Request{Args: []string{"x"}, Cwd: "/"}, s.io(nil))
			errc <- err
		}()
		<-started
		cancel()
		if err := <-causes; !errors.Is(err, ErrDisconnected) {
			t.Errorf("cause %v, want ErrDisconnected", err)
		}
		if err := <-errc; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Errorf("client: %v, want context.Canceled and not ErrUnavailable", err)
		}
	})
	t.Run("signal", func(t *testing.T) {
		s := newStdio(t, nil)
		sigs := make(chan os.Signal, 1)
		errc := make(chan error, 1)
		go func() {
			_, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"x"}, Cwd: "/"}, s.io(sigs))
			errc <- err
		}()
		<-started
		sigs <- syscall.SIGHUP
		var se *SignalError
		if err := <-causes; !errors.As(err, &se) || se.Signal != syscall.SIGHUP {
			t.Errorf("cause %v, want a SignalError for SIGHUP", err)
		}
		if err := <-errc; err != nil {
			t.Error(err)
		}
	})
}

// TestConcurrentCalls: calls run side by side, each with its own streams.
func TestConcurrentCalls(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			msg := strings.Repeat(string(rune('a'+i)), 1000+i)
			s := newStdio(t, strings.NewReader(msg))
			r, err := call(context.Background(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"echo"}, Cwd: "/"}, s.io(nil))
			if err != nil || r.Code != 0 {
				t.Errorf("call %d: %+v %v", i, r, err)
				return
			}
			if out := readFile(t, s.out); out != msg {
				t.Errorf("call %d got %d bytes of someone's output", i, len(out))
			}
		})
	}
	wg.Wait()
}

// TestHandlerPanic: a panicking handler ends its call with an error that
// is not ErrUnavailable (it ran), and the server serves on.
func TestHandlerPanic(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	s := newStdio(t, nil)
	_, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"panic"}, Cwd: "/"}, s.io(nil))
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("call of a panicking handler: %v, want a plain error", err)
	}
	if r, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"exit", "4"}, Cwd: "/"}, s.io(nil)); err != nil || r.Code != 4 {
		t.Fatalf("next call: %+v %v", r, err)
	}
}

// TestUnavailable: every way a request is not delivered gives
// ErrUnavailable, and nothing runs.
func TestUnavailable(t *testing.T) {
	dir := shortDir(t)
	ran := filepath.Join(dir, "ran")
	notSocket := filepath.Join(dir, "file")
	os.WriteFile(notSocket, nil, 0o600)
	const closedFD = 9999 // not open in a test process
	for _, tc := range []struct {
		name string
		opts ClientOptions
		req  Request
		cio  func(c callIO) callIO
		want string
	}{
		{"no socket", ClientOptions{Socket: filepath.Join(dir, "none.sock")}, Request{}, nil, "no such file"},
		{"not a socket", ClientOptions{Socket: notSocket}, Request{}, nil, "connection refused"},
		{"server fails to start", ClientOptions{Socket: filepath.Join(dir, "none.sock"), Server: []string{"/nonexistent/fluffy-core"}}, Request{}, nil, "start the server"},
		{"server exits at once", ClientOptions{Socket: filepath.Join(dir, "none.sock"), Server: []string{"/bin/false"}, Timeout: 300 * time.Millisecond}, Request{}, nil, "a server was started"},
		{"closed stdout", ClientOptions{Socket: filepath.Join(dir, "none.sock")}, Request{}, func(c callIO) callIO { c.stdout = closedFD; return c }, "cannot be passed"},
		{"NUL in an argument", ClientOptions{Socket: filepath.Join(dir, "none.sock")}, Request{Args: []string{"a\x00b"}}, nil, "NUL"},
		{"request too large", ClientOptions{Socket: filepath.Join(dir, "none.sock")}, Request{Environ: []string{strings.Repeat("x", MaxRequest)}}, nil, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStdio(t, nil)
			cio := s.io(nil)
			if tc.cio != nil {
				cio = tc.cio(cio)
			}
			tc.req.Args = append(tc.req.Args, "touch", ran)
			_, err := call(t.Context(), tc.opts, tc.req, cio)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrUnavailable mentioning %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := call(ctx, ClientOptions{Socket: filepath.Join(dir, "none.sock")}, Request{Args: []string{"touch", ran}}, newStdio(t, nil).io(nil)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before the call: %v, want ErrUnavailable and context.Canceled", err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("a command ran")
	}
}

// fakeServer listens on a socket and answers every connection with fn.
func fakeServer(t *testing.T, fn func(c *conn)) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "f.sock")
	ln, _, err := listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			fd, err := ln.accept()
			if err != nil {
				return
			}
			c, _ := newConn(fd, "fake")
			go func() {
				defer c.Close()
				fn(c)
			}()
		}
	}()
	return sock
}

func drainRequest(c *conn) {
	_ = c.setReadDeadline(time.Now().Add(5 * time.Second))
	_, fds, _ := readRequest(c, make([]byte, MaxFrame+1))
	closeFDs(fds)
}

// TestClientDelivery: what the client makes of servers that break off at
// each step. Before "started", nothing ran (ErrUnavailable); after it, the
// outcome is unknown (a plain error).
func TestClientDelivery(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fn          func(c *conn)
		unavailable bool
		want        string
	}{
		{"closes at once", func(c *conn) {}, true, ""}, // EPIPE or EOF, depending on who is first
		{"closes after reading", drainRequest, true, "before taking the request"},
		{"another version", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameRefused, Version: 9, Message: "speak 9"})
		}, true, "protocol version 9, this side speaks 1: speak 9"},
		{"refuses", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameRefused, Version: Version, Message: "no"})
		}, true, "refused the request: no"},
		{"garbage", func(c *conn) {
			drainRequest(c)
			c.send([]byte{0x77, 1}, nil)
		}, true, "malformed"},
		{"reply without started", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameReply})
		}, true, "reply before started"},
		{"too slow", func(c *conn) {
			drainRequest(c)
			time.Sleep(time.Second)
		}, true, "did not take the request within"},
		{"dies after started", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameStarted})
		}, false, "without a reply"},
		{"garbage after started", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameStarted})
			c.send([]byte{0x83, 1}, nil)
		}, false, "malformed reply frame"},
		{"client frame from the server", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameStarted})
			c.sendFrame(frame{Type: frameStdinEOF})
			time.Sleep(time.Second)
		}, false, "protocol error"},
		{"two wants", func(c *conn) {
			drainRequest(c)
			c.sendFrame(frame{Type: frameStarted})
			for range 4 {
				c.sendFrame(frame{Type: frameWant, Want: 10})
			}
			time.Sleep(time.Second)
		}, false, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeServer(t, tc.fn)
			s := newStdio(t, blockingReader{})
			_, err := call(t.Context(), ClientOptions{Socket: sock, Timeout: 200 * time.Millisecond}, Request{Args: []string{"x"}, Cwd: "/"}, s.io(nil))
			if err == nil || errors.Is(err, ErrUnavailable) != tc.unavailable || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want unavailable=%v mentioning %q", err, tc.unavailable, tc.want)
			}
		})
	}
}

// blockingReader never returns (a terminal nobody types into).
type blockingReader struct{}

func (blockingReader) Read([]byte) (int, error) { select {} }

// TestServerRefusesMalformed: requests that break the protocol are
// refused, their descriptors closed, and the server serves on.
func TestServerRefusesMalformed(t *testing.T) {
	ran := make(chan struct{}, 10)
	ts := startTestServer(t, func(context.Context, *Incoming) Reply { ran <- struct{}{}; return Reply{} }, ServerOptions{})
	body, _ := encodeRequest(Request{Args: []string{"a"}, Cwd: "/"})
	good := requestFrames(body, MaxFrame)[0]
	v2 := append([]byte(nil), good...)
	v2[2] = 2
	long := append([]byte(nil), good...)
	long[6] = 0xff // total larger than what follows, then the client ends
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	dn := int(devnull.Fd())
	pf := proofFD(t)
	// A file of the same content as the server's environ, and another
	// process's environ: neither proves reach.
	fake := filepath.Join(t.TempDir(), "environ")
	env, _ := os.ReadFile("/proc/self/environ")
	os.WriteFile(fake, env, 0o600)
	fakeF, _ := os.Open(fake)
	defer fakeF.Close()
	parentF, _ := os.Open("/proc/" + strconv.Itoa(os.Getppid()) + "/environ")
	defer parentF.Close()
	for _, tc := range []struct {
		name   string
		frames [][]byte
		fds    []int
		want   string // the reply's frame type, "eof" for none
	}{
		{"no descriptors", [][]byte{good}, nil, "refused"},
		{"one descriptor", [][]byte{good}, []int{dn}, "refused"},
		{"two descriptors (no proof)", [][]byte{good}, []int{dn, dn}, "refused"},
		{"a proof that is not the server's environ", [][]byte{good}, []int{dn, dn, dn}, "refused"},
		{"a copy of the server's environ", [][]byte{good}, []int{dn, dn, int(fakeF.Fd())}, "refused"},
		{"another process's environ", [][]byte{good}, []int{dn, dn, int(parentF.Fd())}, "refused"},
		{"four descriptors", [][]byte{good}, []int{dn, dn, pf, dn}, "refused"},
		{"another version", [][]byte{v2}, []int{dn, dn, pf}, "refused"},
		{"stdin first", [][]byte{{byte(frameStdin), 'x'}}, []int{dn, dn, pf}, "refused"},
		{"garbage", [][]byte{{0xff}}, []int{dn, dn, pf}, "refused"},
		{"bad body", [][]byte{{byte(frameRequest), 0, 1, 0, 0, 0, 3, 1, 2, 3}}, []int{dn, dn, pf}, "refused"},
		{"short then gone", [][]byte{long}, []int{dn, dn, pf}, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := connect(ts.sock, time.Now().Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, f := range tc.frames {
				var oob []byte
				if i == 0 && tc.fds != nil {
					oob = unix.UnixRights(tc.fds...)
				}
				if err := c.send(f, oob); err != nil {
					t.Fatal(err)
				}
			}
			if tc.name == "short then gone" {
				c.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
			}
			_ = c.setReadDeadline(time.Now().Add(10 * time.Second))
			f, err := recvFrame(c, make([]byte, MaxFrame+1))
			got := "eof"
			if err == nil {
				got = f.Type.String()
			} else if !errors.Is(err, io.EOF) {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("server answered %s, want %s", got, tc.want)
			}
		})
	}
	select {
	case <-ran:
		t.Error("the handler ran for a malformed request")
	default:
	}
	s := newStdio(t, nil)
	if _, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Cwd: "/"}, s.io(nil)); err != nil {
		t.Fatalf("a good call after them: %v", err)
	}
}

// TestServeErrRunning: a second server on the same socket returns
// ErrRunning at once and leaves the first one serving.
func TestServeErrRunning(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	start := time.Now()
	err := Serve(t.Context(), ServerOptions{Socket: ts.sock}, testHandler)
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second Serve: %v, want ErrRunning with the pid", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Serve took %v", d)
	}
	s := newStdio(t, nil)
	if r, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"exit", "5"}, Cwd: "/"}, s.io(nil)); err != nil || r.Code != 5 {
		t.Fatalf("call after: %+v %v", r, err)
	}
}

// TestServeIdleAndStop: the server exits once idle, removing its socket
// but not while a call is in flight; Serve's ctx stops it too.
func TestServeIdleAndStop(t *testing.T) {
	sock := filepath.Join(shortDir(t), "i.sock")
	done := make(chan error, 1)
	r, w, _ := os.Pipe()
	go func() {
		done <- Serve(context.Background(), ServerOptions{Socket: sock, Idle: 300 * time.Millisecond, Ready: w}, testHandler)
	}()
	r.Read(make([]byte, 1))
	r.Close()
	s := newStdio(t, nil)
	// A call longer than the idle time keeps the server.
	if rep, err := call(t.Context(), ClientOptions{Socket: sock}, Request{Args: []string{"sleep", "600ms", "6"}, Cwd: "/"}, s.io(nil)); err != nil || rep.Code != 6 {
		t.Fatalf("long call: %+v %v", rep, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not exit once idle")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	// The lock is free again.
	ctx, cancel := context.WithCancel(t.Context())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if err := Serve(ctx, ServerOptions{Socket: sock}, testHandler); err != nil {
		t.Fatalf("Serve after: %v", err)
	}
}

// TestServeGrace: a stopping server lets a call in flight finish; one
// that outlives the grace period is cancelled with ErrShutdown.
func TestServeGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		want  string
	}{
		{"finishes", 5 * time.Second, "context.Cause <nil>"},
		{"cancelled", 200 * time.Millisecond, "context.Cause " + ErrShutdown.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			ts := startTestServer(t, func(ctx context.Context, c *Incoming) Reply {
				close(started)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				io.WriteString(c.Stdout, "context.Cause "+errString(context.Cause(ctx)))
				return Reply{Code: 9}
			}, ServerOptions{Grace: tc.grace})
			s := newStdio(t, nil)
			res := make(chan error, 1)
			go func() {
				r, err := call(context.Background(), ClientOptions{Socket: ts.sock}, Request{Cwd: "/"}, s.io(nil))
				if err == nil && r.Code != 9 {
					err = errors.New("wrong code")
				}
				res <- err
			}()
			<-started
			ts.cancel()
			// No new connection is taken once stopping.
			time.Sleep(50 * time.Millisecond)
			if _, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Cwd: "/"}, newStdio(t, nil).io(nil)); !errors.Is(err, ErrUnavailable) {
				t.Errorf("call to a stopping server: %v, want ErrUnavailable", err)
			}
			if err := <-res; err != nil {
				t.Fatal(err)
			}
			if out := readFile(t, s.out); out != tc.want {
				t.Errorf("handler: %q, want %q", out, tc.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestEarlyReply: a handler that replies before it returns releases the
// client at once; its clean-up still runs to the end, its context is not
// cancelled by the client leaving, and its return value is ignored.
func TestEarlyReply(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan error, 1)
	ts := startTestServer(t, func(ctx context.Context, c *Incoming) Reply {
		c.Stdout.WriteString("before\n")
		c.Reply(Reply{Code: 7})
		c.Reply(Reply{Code: 8}) // later calls do nothing
		<-release               // the clean-up, after the client left
		if _, err := c.Stdout.WriteString("after\n"); err == nil {
			finished <- errors.New("stdout still open after the early reply")
			return Reply{Code: 9}
		}
		finished <- context.Cause(ctx)
		return Reply{Code: 9}
	}, ServerOptions{})
	s := newStdio(t, nil)
	got, err := call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"x"}}, s.io(nil))
	if err != nil || got != (Reply{Code: 7}) {
		t.Fatalf("reply %+v, %v; want code 7 before the handler returned", got, err)
	}
	close(release)
	select {
	case err := <-finished:
		if err != nil {
			t.Errorf("after the early reply: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not finish")
	}
	if out := readFile(t, s.out); out != "before\n" {
		t.Errorf("stdout %q, want only what came before the reply", out)
	}
}

// BenchmarkCall is one round trip through a real server with an empty
// handler: connect, peer checks (uid, identity), request with two
// descriptors, started, reply.
func BenchmarkCall(b *testing.B) {
	ts := startTestServer(b, func(context.Context, *Incoming) Reply { return Reply{} }, ServerOptions{})
	s := newStdio(b, nil)
	req := Request{Args: []string{"sandbox", "run", "--", "/bin/true"}, Environ: os.Environ(), Cwd: "/"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := call(context.Background(), ClientOptions{Socket: ts.sock}, req, s.io(nil)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoDescriptorLeak: after many calls, broken ones included, the
// server holds no more descriptors than before.
func TestNoDescriptorLeak(t *testing.T) {
	ts := startTestServer(t, nil, ServerOptions{})
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	s := newStdio(t, nil)
	pf := proofFD(t)
	call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"exit", "0"}, Cwd: "/"}, s.io(nil)) // warm up
	before := count()
	for i := range 30 {
		switch i % 3 {
		case 0:
			s2 := *s
			s2.in = strings.NewReader("x")
			call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"echo"}, Cwd: "/"}, s2.io(nil))
		case 1:
			call(t.Context(), ClientOptions{Socket: ts.sock}, Request{Args: []string{"panic"}, Cwd: "/"}, s.io(nil))
		case 2: // a request with descriptors, then gone
			c, err := connect(ts.sock, time.Now().Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := encodeRequest(Request{Args: []string{"x"}, Cwd: "/"})
			c.send(requestFrames(body, MaxFrame)[0][:10], unix.UnixRights(int(s.out.Fd()), int(s.err.Fd()), pf))
			c.Close()
		}
	}
	var after int
	deadline := time.Now().Add(5 * time.Second)
	for after = count(); after > before && time.Now().Before(deadline); after = count() {
		time.Sleep(10 * time.Millisecond)
	}
	if after > before {
		t.Errorf("%d descriptors open after the calls, %d before", after, before)
	}
}

// TestPumpStdinChunks: the client answers each want with one read of at
// most the smaller of the want and its chunk limit, then stdin-eof.
func TestPumpStdinChunks(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newConn(fds[0], "a")
	b, _ := newConn(fds[1], "b")
	defer a.Close()
	defer b.Close()
	wants := make(chan uint32, 1)
	go pumpStdin(a, strings.NewReader(strings.Repeat("x", 250)), wants, 100)
	buf := make([]byte, MaxFrame+1)
	var got []string
	for _, w := range []uint32{MaxChunk, 30, MaxChunk, MaxChunk, MaxChunk} {
		wants <- w
		n, _, err := b.recv(buf, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := decodeFrame(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f.Type.String()+" "+strconv.Itoa(len(f.Data)))
		if f.Type == frameStdinEOF {
			break
		}
	}
	if want := "stdin 100, stdin 30, stdin 100, stdin 20, stdin-eof 0"; strings.Join(got, ", ") != want {
		t.Errorf("frames %q, want %q", strings.Join(got, ", "), want)
	}
}

// TestClientProtocolViolations: a client that breaks the protocol during
// its call is treated as gone: the handler's context is cancelled with
// ErrDisconnected, and the connection closed.
func TestClientProtocolViolations(t *testing.T) {
	causes := make(chan error, 1)
	ts := startTestServer(t, func(ctx context.Context, c *Incoming) Reply {
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
		case <-time.After(10 * time.Second):
			causes <- errors.New("not cancelled")
		}
		return Reply{}
	}, ServerOptions{})
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	dn := int(devnull.Fd())
	for _, tc := range []struct {
		name string
		data []byte
		fds  []int
	}{
		{"stdin nobody asked for", []byte{byte(frameStdin), 'x'}, nil},
		{"a signal not forwarded", []byte{byte(frameSignal), 9}, nil},
		{"a second request", requestFramesOf(t, Request{Cwd: "/"}), nil},
		{"a server frame", []byte{byte(frameReply), 0, 0, 0, 0, 0}, nil},
		{"descriptors mid-call", []byte{byte(frameStdinEOF)}, []int{dn}},
		{"garbage", []byte{0xee, 1, 2}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := connect(ts.sock, time.Now().Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.send(requestFramesOf(t, Request{Args: []string{"x"}, Cwd: "/"}), unix.UnixRights(dn, dn, proofFD(t))); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, MaxFrame+1)
			if f, err := recvFrame(c, buf); err != nil || f.Type != frameStarted {
				t.Fatalf("first frame %v %v", f.Type, err)
			}
			var oob []byte
			if tc.fds != nil {
				oob = unix.UnixRights(tc.fds...)
			}
			if err := c.send(tc.data, oob); err != nil {
				t.Fatal(err)
			}
			if err := <-causes; !errors.Is(err, ErrDisconnected) {
				t.Errorf("cause %v, want ErrDisconnected", err)
			}
		})
	}
}

func requestFramesOf(t *testing.T, r Request) []byte {
	t.Helper()
	body, err := encodeRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	return requestFrames(body, MaxFrame)[0]
}

// TestResetBeforeStarted: a server that dies with the request unread (the
// client connected into the backlog of a server being killed) resets the
// connection; the client tries once more and then reports the server
// unavailable, so that its caller runs the command itself.
func TestResetBeforeStarted(t *testing.T) {
	var conns atomic.Int32
	sock := fakeServer(t, func(c *conn) {
		conns.Add(1)
		time.Sleep(50 * time.Millisecond) // the request arrives, unread: close resets
	})
	s := newStdio(t, nil)
	_, err := call(t.Context(), ClientOptions{Socket: sock}, Request{Args: []string{"x"}}, s.io(nil))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errNotTaken) {
		t.Fatalf("err %v, want ErrUnavailable (not taken)", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (one retry)", n)
	}
}

// proofFD is a client's proof of reach to a server in this process
// (reachProof), closed when the test ends.
func proofFD(t *testing.T) int {
	t.Helper()
	fd, err := reachProof(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
