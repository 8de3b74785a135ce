package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// The test binary, re-executed with these variables set, is a kernel: a
// real child process serving the ipc protocol (or failing the ways real
// kernels fail).
const (
	envSocket = "FLUFFY__BOOTSTRAP_TEST_SOCKET"
	envMode   = "FLUFFY__BOOTSTRAP_TEST_MODE"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(envSocket); sock != "" {
		os.Exit(testKernel(sock, os.Getenv(envMode)))
	}
	goleak.VerifyTestMain(m)
}

func testKernel(sock, mode string) int {
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "kernel: starting")
		fmt.Fprintln(os.Stderr, "kernel: audit log damaged at entry 42")
		return 3
	case "hang":
		ln, err := ipc.Listen(sock)
		if err != nil {
			return 1
		}
		for {
			c, err := ln.Accept() // and never answer
			if err != nil {
				return 1
			}
			defer c.Close()
		}
	}
	mux := ipc.NewMux()
	_ = mux.Handle("status", func(context.Context, *ipc.Request) (any, error) { return os.Getpid(), nil })
	srv, err := ipc.NewServer(ipc.ServerOptions{Mux: mux, Name: "test-kernel", IdleTimeout: 20 * time.Second})
	if err != nil {
		return 1
	}
	ln, err := ipc.Listen(sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernel:", err)
		return 1
	}
	if mode == "slow" { // listening, but busy (checking its audit log) before it serves
		time.Sleep(time.Second)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	_ = srv.Serve(ln)
	return 0
}

// launcher starts test kernels and kills them when the test ends.
type launcher struct {
	t      *testing.T
	sock   string
	mu     sync.Mutex
	mode   string
	procs  []Process
	called int
}

func newLauncher(t *testing.T, mode string) *launcher {
	dir, err := os.MkdirTemp("", "boot")
	if err != nil {
		t.Fatal(err)
	}
	l := &launcher{t: t, sock: filepath.Join(dir, "run", ipc.SocketName), mode: mode}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, p := range l.procs {
			_ = p.Kill()
			<-p.Exited()
		}
		os.RemoveAll(dir)
	})
	return l
}

func (l *launcher) Launch(ctx context.Context) (Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e := Exec{Path: self, Args: []string{"-test.run=^$"}, Log: filepath.Join(filepath.Dir(filepath.Dir(l.sock)), "kernel.log"),
		Env: append(os.Environ(), envSocket+"="+l.sock, envMode+"="+l.mode)}
	p, err := e.Launch(ctx)
	if err == nil {
		l.procs = append(l.procs, p)
		l.called++
	}
	return p, err
}

func (l *launcher) launches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.called
}

func (l *launcher) opts() Options {
	return Options{Socket: l.sock, Launcher: l, Name: "test", StartTimeout: 10 * time.Second, PingTimeout: 2 * time.Second}
}

func kernelPID(t *testing.T, c *ipc.Client) int {
	t.Helper()
	var pid int
	if err := c.Call(t.Context(), "status", nil, &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestConnectStartsThenReuses(t *testing.T) {
	l := newLauncher(t, "serve")
	c1, err := Connect(t.Context(), l.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	pid := kernelPID(t, c1)
	if pid == os.Getpid() || c1.Server().Name != "test-kernel" {
		t.Fatalf("connected to %+v (pid %d), want a child kernel", c1.Server(), pid)
	}
	c2, err := Connect(t.Context(), l.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := kernelPID(t, c2); got != pid || l.launches() != 1 {
		t.Fatalf("second Connect reached pid %d after %d launches, want pid %d and 1 launch", got, l.launches(), pid)
	}
}

func TestConcurrentConnectsStartOneKernel(t *testing.T) {
	l := newLauncher(t, "serve")
	var wg sync.WaitGroup
	pids := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Connect(t.Context(), l.opts())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			pids <- int(c.ServerCred().PID)
		}()
	}
	wg.Wait()
	close(pids)
	seen := map[int]bool{}
	for p := range pids {
		seen[p] = true
	}
	if len(seen) != 1 || l.launches() != 1 {
		t.Fatalf("kernels reached: %v after %d launches, want one", seen, l.launches())
	}
}

// TestStaleSocket: a kernel killed with -9 leaves its socket file; the
// next Connect removes it and starts a new kernel.
func TestStaleSocket(t *testing.T) {
	l := newLauncher(t, "serve")
	c, err := Connect(t.Context(), l.opts())
	if err != nil {
		t.Fatal(err)
	}
	old := kernelPID(t, c)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if _, err := os.Lstat(l.sock); err != nil {
		t.Fatalf("kill -9 should leave the socket file: %v", err)
	}
	c2, err := Connect(t.Context(), l.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if pid := kernelPID(t, c2); pid == old {
		t.Fatal("reached the dead kernel")
	}
}

func TestStartErrors(t *testing.T) {
	cases := []struct {
		name  string
		mode  string
		setup func(t *testing.T, sock string)
		what  string
		fix   string
	}{
		{name: "kernel exits at start", mode: "exit",
			what: "the kernel exited at start: exit status 3; its last output",
			fix:  "run 'fluffy kernel' in a terminal"},
		{name: "regular file in the socket's place", mode: "serve",
			setup: func(t *testing.T, sock string) {
				if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(sock, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			what: "something that is not a socket is in the kernel socket's place", fix: "remove it"},
		{name: "socket directory of another user", mode: "serve",
			setup: func(t *testing.T, sock string) {
				if os.Geteuid() != 0 {
					t.Skip("needs root to chown")
				}
				if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(filepath.Dir(sock), 65534, 65534); err != nil {
					t.Fatal(err)
				}
			},
			what: "no permission to reach the kernel socket", fix: "both must be yours"},
		{name: "hung kernel", mode: "hang",
			what: "accepts connections but does not answer within 1s", fix: "it is stuck, or still checking a large audit log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLauncher(t, tc.mode)
			if tc.setup != nil {
				tc.setup(t, l.sock)
			}
			o := l.opts()
			o.PingTimeout = 200 * time.Millisecond
			o.StartTimeout = time.Second // a launched kernel gets it all to answer
			c, err := Connect(t.Context(), o)
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded")
			}
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want a *StartError", err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.what) || !strings.Contains(se.Fix, tc.fix) {
				t.Fatalf("message:\n%s\nwant %q and a fix with %q", msg, tc.what, tc.fix)
			}
			if tc.mode == "exit" && !strings.Contains(msg, "audit log damaged at entry 42") {
				t.Fatalf("the kernel's own words are missing:\n%s", msg)
			}
		})
	}
}

// TestHungKernelFound: a kernel that is already running but hung is
// reported with its pid, not replaced behind the user's back.
func TestHungKernelFound(t *testing.T) {
	l := newLauncher(t, "hang")
	p, err := l.Launch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hung kernel listening", func() bool { _, err := os.Lstat(l.sock); return err == nil })
	o := l.opts()
	o.PingTimeout = 100 * time.Millisecond
	_, err = Connect(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the kernel (pid %d) accepts connections but does not answer", p.Pid())) {
		t.Fatalf("err = %v; want it to name pid %d", err, p.Pid())
	}
	if l.launches() != 1 {
		t.Fatal("a second kernel was launched beside the hung one")
	}
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

func TestOptionsRequired(t *testing.T) {
	if _, err := Connect(t.Context(), Options{}); err == nil {
		t.Fatal("empty options accepted")
	}
}

// TestLineBudget keeps the bootstrap small: under 500 lines of code
// (non-blank, non-comment) across its non-test files.
func TestLineBudget(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n, err := codeLines(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d lines of code", f, n)
		total += n
	}
	if total == 0 || total >= 500 {
		t.Fatalf("internal/bootstrap has %d lines of code; the budget is under 500", total)
	}
}

// codeLines counts lines that are neither blank nor only comment.
func codeLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, inBlock := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if inBlock {
			if i := strings.Index(l, "*/"); i >= 0 {
				inBlock = false
				l = strings.TrimSpace(l[i+2:])
			} else {
				continue
			}
		}
		if strings.HasPrefix(l, "/*") && !strings.Contains(l, "*/") {
			inBlock = true
			continue
		}
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		n++
	}
	return n, sc.Err()
}

func TestCodeLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.go")
	src := "// doc\npackage x\n\n/* block\nstill */\nvar a = 1 // trailing\n  // indented\nfunc f() {}\n"
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := codeLines(p); err != nil || n != 3 {
		t.Fatalf("codeLines = %d, %v; want 3", n, err)
	}
}

func TestRunningNeverStarts(t *testing.T) {
	l := newLauncher(t, "serve")
	if c, err := Running(t.Context(), l.opts()); c != nil || err != nil {
		t.Fatalf("no kernel: Running = %v, %v", c, err)
	}
	c, err := Connect(t.Context(), l.opts())
	if err != nil {
		t.Fatal(err)
	}
	pid := kernelPID(t, c)
	c2, err := Running(t.Context(), l.opts())
	if err != nil || c2 == nil || kernelPID(t, c2) != pid {
		t.Fatalf("running kernel: Running = %v, %v", c2, err)
	}
	c2.Close()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-c.Done()
	if c, err := Running(t.Context(), l.opts()); c != nil || err != nil {
		t.Fatalf("stale socket: Running = %v, %v", c, err)
	}
	if l.launches() != 1 {
		t.Fatalf("Running launched a kernel (%d launches)", l.launches())
	}
}

// TestExplain covers every start-up failure's message and fix, including
// those hard to stage with real processes (another version, another user).
func TestExplain(t *testing.T) {
	o := Options{Socket: "/run/fluffy/kernel.sock"}
	dialErr := func(pid int32, err error) error {
		return &ipc.DialError{Path: o.Socket, Cred: ipc.Cred{PID: pid}, Err: err}
	}
	cases := []struct {
		name     string
		err      error
		what     string
		fix      string
		launches bool // nil: launching a kernel is the answer
	}{
		{"no socket", dialErr(0, syscall.ENOENT), "", "", true},
		{"stale socket", dialErr(0, syscall.ECONNREFUSED), "", "", true},
		{"other version", dialErr(42, ipc.Errorf(ipc.CodeVersionMismatch, "client speaks protocol 2..2")),
			"the running kernel speaks another protocol version", "stop it (kill 42)", false},
		{"other user's kernel", dialErr(42, ipc.Errorf(ipc.CodePermissionDenied, "served by uid 1000")),
			"the kernel socket belongs to another user", "is not yours", false},
		{"permission", dialErr(0, syscall.EACCES), "no permission to reach the kernel socket", "ls -la /run/fluffy", false},
		{"hung", dialErr(42, context.DeadlineExceeded), "the kernel (pid 42) accepts connections but does not answer", "kill 42", false},
		{"not a socket", fmt.Errorf("x: %w", ipc.ErrNotSocket), "something that is not a socket", "remove it", false},
		{"in use", fmt.Errorf("x: %w", ipc.ErrInUse), "does not answer as a kernel", "ss -xlp", false},
		{"other", errors.New("strange"), "cannot reach the kernel", "fluffy doctor", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			se := explain(o, tc.err)
			if tc.launches {
				if se != nil {
					t.Fatalf("explain = %v, want nil (launch)", se)
				}
				return
			}
			if se == nil || !strings.Contains(se.What, tc.what) || !strings.Contains(se.Fix, tc.fix) || !errors.Is(se, tc.err) {
				t.Fatalf("explain = %+v, want %q with a fix containing %q, wrapping the cause", se, tc.what, tc.fix)
			}
		})
	}
}

// TestCheckRuntimeStopsLaunch: when no sandbox runtime is usable the
// kernel is not launched and the detector's StartError comes back as is;
// a running kernel is reached without detecting again.
func TestCheckRuntimeStopsLaunch(t *testing.T) {
	l := newLauncher(t, "serve")
	o := l.opts()
	want := &StartError{What: "no usable sandbox runtime", Err: errors.New("native: user namespaces are disabled"), Fix: "enable them"}
	checks := 0
	o.CheckRuntime = func(context.Context) error { checks++; return want }
	_, err := Connect(t.Context(), o)
	var se *StartError
	if !errors.As(err, &se) || se != want || l.launches() != 0 {
		t.Fatalf("err = %v (launches %d), want the detector's StartError and no launch", err, l.launches())
	}
	if !strings.Contains(err.Error(), "\nfix: enable them") {
		t.Errorf("message %q lacks the fix", err)
	}
	o.CheckRuntime = func(context.Context) error { checks++; return nil }
	c, err := Connect(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c2, err := Connect(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if checks != 2 || l.launches() != 1 {
		t.Errorf("%d checks, %d launches; want 2 and 1 (no check when a kernel answers)", checks, l.launches())
	}
}

// TestSlowStartingKernel: a launched kernel that listens but answers only
// after several ping timeouts (a kernel verifying a large audit log) is
// waited for up to StartTimeout, not killed as hung.
func TestSlowStartingKernel(t *testing.T) {
	l := newLauncher(t, "slow")
	o := l.opts()
	o.PingTimeout = 200 * time.Millisecond
	c, err := Connect(t.Context(), o)
	if err != nil {
		t.Fatalf("a slow-starting kernel was given up: %v", err)
	}
	c.Close()
	if l.launches() != 1 {
		t.Errorf("%d launches, want 1", l.launches())
	}
}

// A kernel log past MaxKernelLog is moved to log.1 at the next launch
// (one older generation kept); a smaller one is appended to.
func TestKernelLogRotates(t *testing.T) {
	log := filepath.Join(t.TempDir(), "kernel.log")
	launch := func() {
		t.Helper()
		p, err := Exec{Path: "/bin/sh", Args: []string{"-c", "echo started"}, Log: log}.Launch(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
	}
	if err := os.WriteFile(log, []byte("small\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	launch()
	if b, _ := os.ReadFile(log); string(b) != "small\nstarted\n" {
		t.Fatalf("a small log was not appended to: %q", b)
	}
	big := bytes.Repeat([]byte("x"), MaxKernelLog+1)
	if err := os.WriteFile(log, big, 0o600); err != nil {
		t.Fatal(err)
	}
	launch()
	if b, _ := os.ReadFile(log); string(b) != "started\n" {
		t.Errorf("after rotation the log holds %d bytes, want only the new kernel's line", len(b))
	}
	if st, err := os.Stat(log + ".1"); err != nil || st.Size() != int64(len(big)) {
		t.Errorf("the old generation: %v %v", st, err)
	}
}
