package sandboxd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The test binary doubles as a server and as a client process, re-executed
// with one of these as its first argument.
const (
	modeServer = "__sandboxd_server" // [serve] --socket S [--idle D] [--grace D] [--ready-fd N]
	modeClient = "__sandboxd_client" // SOCKET TIMEOUT IDLE -- ARGS...: Call, exit with the reply's code ($SANDBOXD_TEST_CATCH_AFTER: ClientOptions.CatchSignalsAfter)
	modeRaw    = "__sandboxd_raw"    // SOCKET: connect, send a request, print what comes back
	// modeFilter stacks one more seccomp filter (it allows every call)
	// and executes ARGS.
	modeFilter = "__sandboxd_filter" // ARGS...
)

// Exit codes of the client mode for the outcomes that are not a reply.
const (
	exitUnavailable = 201
	exitError       = 202
	exitHandOver    = 203
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case modeServer:
			os.Exit(serverMain(os.Args[2:]))
		case modeClient:
			os.Exit(clientMain(os.Args[2:]))
		case modeRaw:
			os.Exit(rawMain(os.Args[2:]))
		case modeFilter:
			os.Exit(filterMain(os.Args[2:]))

		}
	}
	killOrphanServers()
	os.Exit(m.Run())
}

// killOrphanServers kills the test servers earlier runs left: a test
// binary killed by its timeout does not clean up, and a server it had
// stopped (SIGSTOP, the hung-server tests) never idles out. A server is
// an orphan when its socket's directory (a test's temporary directory)
// is gone.
func killOrphanServers() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != modeServer {
			continue
		}
		args = args[2:]
		if len(args) > 0 && args[0] == "serve" {
			args = args[1:]
		}
		if len(args) < 2 || args[0] != "--socket" {
			continue
		}
		if _, err := os.Stat(filepath.Dir(args[1])); errors.Is(err, os.ErrNotExist) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func serverMain(args []string) int {
	// "serve" first makes the command line a server's to Status, as
	// `fluffy-core sandbox serve --socket S` is.
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	sock := fs.String("socket", "", "")
	idle := fs.Duration("idle", time.Minute, "")
	grace := fs.Duration("grace", 5*time.Second, "")
	readyFD := fs.Int("ready-fd", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	opts := ServerOptions{Socket: *sock, Idle: *idle, Grace: *grace,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if *readyFD > 0 {
		f, err := ReadyFile(*readyFD)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		opts.Ready = f
	}
	err := Serve(ctx, opts, testHandler)
	if errors.Is(err, ErrRunning) {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	return 0
}

func clientMain(args []string) int {
	if len(args) < 4 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: SOCKET TIMEOUT IDLE -- ARGS")
		return 2
	}
	timeout, _ := time.ParseDuration(args[1])
	catchAfter, _ := time.ParseDuration(os.Getenv("SANDBOXD_TEST_CATCH_AFTER"))
	self, _ := os.Executable()
	r, err := Call(context.Background(), ClientOptions{
		Socket:            args[0],
		Server:            []string{self, modeServer, "--socket", args[0], "--idle", args[2]},
		Timeout:           timeout,
		CatchSignalsAfter: catchAfter,
	}, Request{Args: args[4:], Environ: os.Environ(), Cwd: mustGetwd()})
	switch {
	case errors.Is(err, ErrUnavailable):
		fmt.Fprintln(os.Stderr, "client:", err)
		return exitUnavailable
	case err != nil:
		fmt.Fprintln(os.Stderr, "client:", err)
		return exitError
	case r.HandOver:
		return exitHandOver
	}
	return r.Code
}

// rawMain connects without the client's own checks, sends a well-formed
// request ["exit", "0"] and prints the type of the first frame it gets,
// or "closed" when the server closed the connection.
func rawMain(args []string) int {
	c, err := connect(args[0], time.Now().Add(time.Second))
	if err != nil {
		fmt.Println("connect:", err)
		return 1
	}
	body, _ := encodeRequest(Request{Args: []string{"exit", "0"}, Cwd: "/"})
	rights := unix.UnixRights(1, 2)
	if _, pid, err := c.peerUID(); err == nil {
		if proof, err := reachProof(pid); err == nil {
			rights = unix.UnixRights(1, 2, proof)
		}
	}
	if err := c.send(requestFrames(body, MaxFrame)[0], rights); errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		fmt.Println("closed")
		return 0
	} else if err != nil {
		fmt.Println("send:", err)
		return 1
	}
	f, err := recvFrame(c, make([]byte, MaxFrame+1))
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		fmt.Println("closed")
	case err != nil:
		fmt.Println("recv:", err)
	default:
		fmt.Println(f.Type)
	}
	return 0
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}

// testHandler serves the test commands, by Args[0]:
//
//	exit N          reply N
//	handover        reply HandOver
//	write OUT ERR   write OUT to stdout, ERR to stderr
//	echo            copy stdin to stdout
//	noread          reply 0 without reading stdin
//	env KEY         print KEY's value in the request's environment, and the cwd
//	selfenv         print the server process's own environment
//	pid             print the server's pid
//	touch PATH      create PATH
//	block DIR       create DIR/started, wait for the context, write its cause to DIR/cause, reply 1
//	signals N       wait for N forwarded signals, print them and the context's cause, reply 130
//	sleep D CODE    sleep D, reply CODE (99 if the context ends first)
//	fds             print whether stdout and stderr are close-on-exec
//	panic           panic
func testHandler(ctx context.Context, c *Incoming) Reply {
	arg := func(i int) string {
		if i < len(c.Args) {
			return c.Args[i]
		}
		return ""
	}
	switch arg(0) {
	case "exit":
		n, _ := strconv.Atoi(arg(1))
		return Reply{Code: n}
	case "handover":
		return Reply{HandOver: true}
	case "write":
		io.WriteString(c.Stdout, arg(1))
		io.WriteString(c.Stderr, arg(2))
		return Reply{}
	case "echo":
		if _, err := io.Copy(c.Stdout, c.Stdin); err != nil {
			fmt.Fprintln(c.Stderr, "echo:", err)
			return Reply{Code: 1}
		}
		return Reply{}
	case "noread":
		return Reply{}
	case "env":
		for _, kv := range c.Environ {
			if k, v, _ := strings.Cut(kv, "="); k == arg(1) {
				fmt.Fprintln(c.Stdout, v)
			}
		}
		fmt.Fprintln(c.Stdout, c.Cwd)
		return Reply{}
	case "selfenv":
		fmt.Fprintln(c.Stdout, strings.Join(os.Environ(), "\n"))
		return Reply{}
	case "pid":
		fmt.Fprintln(c.Stdout, os.Getpid())
		return Reply{}
	case "touch":
		if err := os.WriteFile(arg(1), nil, 0o600); err != nil {
			return Reply{Code: 1}
		}
		return Reply{}
	case "block":
		os.WriteFile(filepath.Join(arg(1), "started"), nil, 0o600)
		<-ctx.Done()
		os.WriteFile(filepath.Join(arg(1), "cause"), []byte(context.Cause(ctx).Error()), 0o600)
		return Reply{Code: 1}
	case "signals":
		n, _ := strconv.Atoi(arg(1))
		fmt.Fprintln(c.Stdout, "ready")
		for range n {
			select {
			case s := <-c.Signals:
				fmt.Fprintln(c.Stdout, SignalName(s))
			case <-time.After(10 * time.Second):
				fmt.Fprintln(c.Stdout, "timeout")
				return Reply{Code: 1}
			}
		}
		fmt.Fprintln(c.Stdout, context.Cause(ctx))
		return Reply{Code: 130}
	case "sleep":
		d, _ := time.ParseDuration(arg(1))
		n, _ := strconv.Atoi(arg(2))
		select {
		case <-time.After(d):
			return Reply{Code: n}
		case <-ctx.Done():
			return Reply{Code: 99}
		}
	case "fds":
		for _, f := range []*os.File{c.Stdout, c.Stderr} {
			flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
			fmt.Fprintln(c.Stdout, err == nil && flags&unix.FD_CLOEXEC != 0)
		}
		return Reply{}
	case "panic":
		panic("test handler panics")
	}
	fmt.Fprintln(c.Stderr, "unknown test command", c.Args)
	return Reply{Code: 2}
}

// shortDir is a temporary directory with a path short enough for
// sockets (t.TempDir's include the test's name).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// testServer is an in-process server on a temporary socket.
type testServer struct {
	sock   string
	cancel context.CancelFunc
	done   chan error
}

func startTestServer(t testing.TB, h Handler, opts ServerOptions) *testServer {
	t.Helper()
	if opts.Socket == "" {
		opts.Socket = filepath.Join(shortDir(t), "s.sock")
	}
	if h == nil {
		h = testHandler
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	opts.Ready = w
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{sock: opts.Socket, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- Serve(ctx, opts, h) }()
	var b [1]byte
	if _, err := r.Read(b[:]); err != nil {
		cancel()
		t.Fatalf("server not ready: %v (Serve: %v)", err, <-ts.done)
	}
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) stop(t testing.TB) {
	ts.cancel()
	select {
	case err, ok := <-ts.done:
		if ok && err != nil {
			t.Errorf("Serve: %v", err)
		}
		if ok {
			close(ts.done)
		}
	case <-time.After(20 * time.Second):
		t.Error("Serve did not return")
	}
}

// stdio is a client's standard streams in a test: stdin from a reader,
// stdout and stderr into temporary files.
type stdio struct {
	in       io.Reader
	out, err *os.File
}

func newStdio(t testing.TB, in io.Reader) *stdio {
	t.Helper()
	d := t.TempDir()
	out, err := os.Create(filepath.Join(d, "out"))
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(filepath.Join(d, "err"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close(); errf.Close() })
	if in == nil {
		in = strings.NewReader("")
	}
	return &stdio{in: in, out: out, err: errf}
}

// pipedStdout is a call's stdio (newStdio) whose stdout is a pipe, read
// at pr (closed when the test ends); the caller closes pw once the call
// is over.
func pipedStdout(t testing.TB, signals <-chan os.Signal) (cio callIO, pr, pw *os.File) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	cio = newStdio(t, nil).io(signals)
	cio.stdout = int(pw.Fd())
	return cio, pr, pw
}

func (s *stdio) io(signals <-chan os.Signal) callIO {
	return callIO{stdin: s.in, stdout: int(s.out.Fd()), stderr: int(s.err.Fd()), signals: signals}
}

func readFile(t testing.TB, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// filterMain stacks a seccomp filter that allows every call (it changes
// nothing but the count of filters) and executes args.
func filterMain(args []string) int {
	if err := stackAllowFilter(); err != nil {
		fmt.Fprintln(os.Stderr, "filter:", err)
		return 1
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 1
}

// stackAllowFilter adds a one-instruction seccomp filter ("allow") to
// every thread of this process, under no_new_privs.
func stackAllowFilter() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	ins := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}
