package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The lifecycle tests run real processes: clients are this test binary
// re-executed in modeClient, calling Call with a Server argv that
// re-executes it in modeServer.

type clientRun struct {
	code        int
	out, errOut string
}

func clientCmd(t *testing.T, sock string, timeout, idle time.Duration, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{modeClient, sock, timeout.String(), idle.String(), "--"}, args...)
	return exec.Command(self, argv...)
}

func runClient(t *testing.T, sock string, args ...string) clientRun {
	t.Helper()
	return runCmd(t, clientCmd(t, sock, 3*time.Second, time.Minute, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) clientRun {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("client: %v", err)
	}
	return clientRun{code: cmd.ProcessState.ExitCode(), out: out.String(), errOut: errOut.String()}
}

// lifecycleSocket is a socket in a fresh private directory; the test's end
// stops whatever server holds it.
func lifecycleSocket(t *testing.T) string {
	t.Helper()
	dir := shortDir(t)
	sock := filepath.Join(dir, "l.sock")
	t.Cleanup(func() {
		if pid := lockPID(sock); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			if b, err := os.ReadFile(sock + ".log"); err == nil {
				t.Logf("server log:\n%s", b)
			}
		}
	})
	return sock
}

// lockPID is the pid the lock file names (0 if none).
func lockPID(sock string) int {
	b, _ := os.ReadFile(sock + ".lock")
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive says whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
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

func serverPID(t *testing.T, sock string) int {
	t.Helper()
	r := runClient(t, sock, "pid")
	pid, err := strconv.Atoi(strings.TrimSpace(r.out))
	if r.code != 0 || err != nil {
		t.Fatalf("pid call: %+v", r)
	}
	return pid
}

// TestStartOnDemand: the first client starts a detached server, with a
// clean environment, that later clients reuse; replies, output and the
// request's environment pass through.
func TestStartOnDemand(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	if !alive(pid) || lockPID(sock) != pid {
		t.Fatalf("server %d alive %v, lock names %d", pid, alive(pid), lockPID(sock))
	}
	if again := serverPID(t, sock); again != pid {
		t.Errorf("second call served by %d, first by %d", again, pid)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		out    string
		errOut string
	}{
		{[]string{"exit", "0"}, 0, "", ""},
		{[]string{"exit", "42"}, 42, "", ""},
		{[]string{"handover"}, exitHandOver, "", ""},
		{[]string{"write", "out!", "err!"}, 0, "out!", "err!"},
	} {
		r := runClient(t, sock, tc.args...)
		if r.code != tc.code || r.out != tc.out || r.errOut != tc.errOut {
			t.Errorf("%q: got %+v, want code %d out %q err %q", tc.args, r, tc.code, tc.out, tc.errOut)
		}
	}
	// The request carries the client's environment; the server process
	// has none of it beyond its short list.
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "env", "SECRET_TOKEN")
	cmd.Env = append(os.Environ(), "SECRET_TOKEN=hunter2")
	cmd.Dir = t.TempDir()
	if r := runCmd(t, cmd); r.out != "hunter2\n"+cmd.Dir+"\n" {
		t.Errorf("request environment and cwd: %q", r.out)
	}
	self := runClient(t, sock, "selfenv")
	for _, kv := range strings.Split(strings.TrimSpace(self.out), "\n") {
		k, _, _ := strings.Cut(kv, "=")
		if kv != "" && !strings.Contains(" PATH HOME USER LOGNAME TMPDIR XDG_RUNTIME_DIR ", " "+k+" ") {
			t.Errorf("the server's environment has %s", k)
		}
	}
	if fi, err := os.Stat(sock + ".log"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("server log beside the socket: %v %v", fi, err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v %v, want a 0600 socket", fi, err)
	}
}

// TestConcurrentStarts: clients that find no server at the same moment all
// end up served, by one server.
func TestConcurrentStarts(t *testing.T) {
	sock := lifecycleSocket(t)
	const n = 8
	var wg sync.WaitGroup
	runs := make([]clientRun, n)
	for i := range n {
		wg.Go(func() { runs[i] = runClient(t, sock, "pid") })
	}
	wg.Wait()
	pids := map[string]bool{}
	for i, r := range runs {
		if r.code != 0 {
			t.Errorf("client %d: %+v", i, r)
		}
		pids[strings.TrimSpace(r.out)] = true
	}
	if len(pids) != 1 {
		t.Errorf("served by %d servers: %v", len(pids), pids)
	}
}

// TestStaleSocket: after kill -9 of the server its socket file remains;
// the next client starts a new server in its place.
func TestStaleSocket(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the server's death", func() bool { return !alive(pid) })
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	next := serverPID(t, sock)
	if next == pid || !alive(next) {
		t.Errorf("served by %d after %d died", next, pid)
	}
}

// TestKillClientCancels: kill -9 of a client mid-call cancels the
// handler's context (ErrDisconnected) at once.
func TestKillClientCancels(t *testing.T) {
	sock := lifecycleSocket(t)
	serverPID(t, sock)
	dir := t.TempDir()
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "block", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	killed := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	var cause []byte
	waitFor(t, "the handler's cancellation", func() bool {
		cause, _ = os.ReadFile(filepath.Join(dir, "cause"))
		return len(cause) > 0
	})
	if string(cause) != ErrDisconnected.Error() {
		t.Errorf("cause %q, want %q", cause, ErrDisconnected)
	}
	t.Logf("cancelled %v after the kill", time.Since(killed))
}

// TestKillServerMidCall: a server killed during a call leaves its client
// with a plain error (the command may have run), not ErrUnavailable.
func TestKillServerMidCall(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	dir := t.TempDir()
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "block", dir)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	syscall.Kill(pid, syscall.SIGKILL)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitError || !strings.Contains(errOut.String(), "outcome is unknown") {
		t.Errorf("client exited %d (%s), want %d and an unknown outcome", code, errOut.String(), exitError)
	}
}

// TestServerSIGTERM: SIGTERM stops the server from taking calls, lets
// the call in flight finish, removes the socket and exits.
func TestServerSIGTERM(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "sleep", "700ms", "7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	syscall.Kill(pid, syscall.SIGTERM)
	waitFor(t, "the socket's removal", func() bool { _, err := os.Lstat(sock); return err != nil })
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("call in flight exited %d, want 7", code)
	}
	waitFor(t, "the server's exit", func() bool { return !alive(pid) })
}

// TestIdleExit: a server with no call for its idle time exits and removes
// its socket.
func TestIdleExit(t *testing.T) {
	sock := lifecycleSocket(t)
	r := runCmd(t, clientCmd(t, sock, 3*time.Second, 300*time.Millisecond, "pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(r.out))
	if r.code != 0 || pid == 0 {
		t.Fatalf("%+v", r)
	}
	waitFor(t, "the idle exit", func() bool { return !alive(pid) })
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the idle exit: %v", err)
	}
}

// TestHungServer: a server that does not take a request in time (stopped
// here) makes the client fall back with ErrUnavailable, and the command
// is not run when the server wakes up: at most once, never twice.
func TestHungServer(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	marker := filepath.Join(t.TempDir(), "ran")
	stopProcess(t, pid)
	// Files, not pipes, for the client's output: the descriptors it sent
	// wait in the stopped server's socket queue, holding a pipe open.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd := clientCmd(t, sock, 300*time.Millisecond, time.Minute, "touch", marker)
	cmd.Stderr = errFile
	err = cmd.Run()
	syscall.Kill(pid, syscall.SIGCONT)
	errOut, _ := os.ReadFile(errFile.Name())
	if code := cmd.ProcessState.ExitCode(); code != exitUnavailable || !strings.Contains(string(errOut), "did not take the request") {
		t.Fatalf("client of a stopped server: %v %s, want ErrUnavailable", err, errOut)
	}
	if again := serverPID(t, sock); again != pid {
		t.Fatalf("server %d replaced by %d", pid, again)
	}
	// The server, woken, read the request and gave up on it: the client
	// is gone (it cannot say "started", or cannot even check the client).
	waitFor(t, "the server's giving up on the call", func() bool {
		b, _ := os.ReadFile(sock + ".log")
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "client_pid="+strconv.Itoa(cmd.Process.Pid)+" ") &&
				(strings.Contains(line, "client gone before its call started") || strings.Contains(line, "request refused")) {
				return true
			}
		}
		return false
	})
	if _, err := os.Stat(marker); err == nil {
		t.Error("the server ran the command its client had given up on")
	}
}

// TestClientSignals: Ctrl-C (SIGINT) to a client process is forwarded,
// twice; the client waits for the handler's exit code.
func TestClientSignals(t *testing.T) {
	sock := lifecycleSocket(t)
	serverPID(t, sock)
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "signals", "2")
	pr := startReady(t, cmd)
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(100 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	out, _ := io.ReadAll(pr)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("client exited %d (%v), want 130", code, cmd.ProcessState)
	}
	if want := "SIGINT\nSIGINT\nsandboxd: client forwarded SIGINT\n"; string(out) != want {
		t.Errorf("handler saw %q, want %q", out, want)
	}
}

// startReady starts a client whose handler ("signals") says "ready" first,
// and returns its stdout, read past that line (closed when the test ends).
func startReady(t *testing.T, cmd *exec.Cmd) *os.File {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("handler said %q %v", buf, err)
	}
	return pr
}

// copyForNobody copies the test binary where the nobody user can run it.
func copyForNobody(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "sandboxd.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func asNobody(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	return cmd
}

// TestForeignUID: the server closes a connection from another user
// (SO_PEERCRED) without running anything, and the client refuses a
// server of another user. The socket is opened wide here to let the
// other user reach it at all (SocketPath's directory alone keeps them
// out).
func TestForeignUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as nobody")
	}
	bin := copyForNobody(t)
	ran := make(chan []string, 10)
	dir := shortDir(t)
	os.Chmod(dir, 0o755)
	var logBuf syncBuffer
	ts := startTestServer(t, func(_ context.Context, c *Incoming) Reply { ran <- c.Args; return Reply{} },
		ServerOptions{Socket: filepath.Join(dir, "u.sock"), Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	os.Chmod(ts.sock, 0o777)

	t.Run("server refuses", func(t *testing.T) {
		out, err := asNobody(exec.Command(bin, modeRaw, ts.sock)).CombinedOutput()
		if err != nil || string(out) != "closed\n" {
			t.Errorf("nobody's raw client: %q %v, want the connection closed", out, err)
		}
		select {
		case args := <-ran:
			t.Errorf("the handler ran %q for another user", args)
		default:
		}
		waitFor(t, "the refusal in the server's log", func() bool {
			return strings.Contains(logBuf.String(), "connection refused: client of another user") && strings.Contains(logBuf.String(), "client_uid=65534")
		})
	})
	t.Run("client refuses", func(t *testing.T) {
		// A server of nobody's, called by root.
		nd := shortDir(t)
		os.Chown(nd, nobody, nobody)
		sock := filepath.Join(nd, "n.sock")
		srv := asNobody(exec.Command(bin, modeServer, "--socket", sock))
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		waitFor(t, "nobody's server", func() bool { _, err := os.Lstat(sock); return err == nil })
		s := newStdio(t, nil)
		_, err := call(t.Context(), ClientOptions{Socket: sock}, Request{Args: []string{"exit", "0"}, Cwd: "/"}, s.io(nil))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("runs as uid %d, not as you", nobody)) {
			t.Errorf("call to nobody's server: %v", err)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestPeerIdentity: a client of the same uid that confined itself (or
// differs otherwise) is not served by a server without that confinement:
// the server refuses it and the client runs the command itself
// (ErrUnavailable). A user namespace passes the uid check alone (its
// root maps to our uid), which is why the identity is compared.
func TestPeerIdentity(t *testing.T) {
	ran := make(chan []string, 10)
	ts := startTestServer(t, func(_ context.Context, c *Incoming) Reply { ran <- c.Args; return Reply{Code: 3} }, ServerOptions{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	umask := "077"
	if old := syscall.Umask(0o22); old == 0o77 {
		umask = "027"
	} else {
		syscall.Umask(old)
	}
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		name string
		wrap []string
		root bool
		want string // "" for served
	}{
		{"same identity", nil, false, ""},
		{"umask", []string{"/bin/sh", "-c", "umask " + umask + "; exec \"$0\" \"$@\""}, false, "umask"},
		{"no_new_privs", []string{"setpriv", "--nnp"}, false, "no_new_privs"},
		{"seccomp filter", []string{self, modeFilter}, false, "seccomp filters"},
		{"resource limits", []string{"/bin/sh", "-c", "ulimit -S -s 4096; exec \"$0\" \"$@\""}, false, "resource limits"},
		{"user namespace", []string{"unshare", "--user", "--map-current-user"}, false, "user namespace"},
		{"mount namespace", []string{"unshare", "--mount"}, true, "mnt namespace"},
		{"network namespace", []string{"unshare", "--net"}, true, "net namespace"},
		{"capabilities", []string{"setpriv", "--bounding-set", "-all"}, true, "capability bounding set"},
		{"groups", []string{"setpriv", "--groups", "1,2"}, true, "supplementary groups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && !root {
				t.Skip("needs root")
			}
			if len(tc.wrap) > 0 {
				if _, err := exec.LookPath(tc.wrap[0]); err != nil {
					t.Skipf("%s: %v (util-linux)", tc.wrap[0], err)
				}
			}
			argv := append(append(tc.wrap, self, modeClient, ts.sock, "3s", "1m", "--"), "x")
			cmd := exec.Command(argv[0], argv[1:]...)
			r := runCmd(t, cmd)
			if tc.want == "" {
				if r.code != 3 {
					t.Fatalf("client: %+v, want served (3)", r)
				}
				<-ran
				return
			}
			if r.code == 1 && strings.Contains(r.errOut, "unshare") {
				t.Skipf("%s: %s", tc.wrap, r.errOut)
			}
			if r.code != exitUnavailable || !strings.Contains(r.errOut, "the client differs from the server in: ") || !strings.Contains(r.errOut, tc.want) {
				t.Errorf("client: %+v, want ErrUnavailable naming %s", r, tc.want)
			}
			select {
			case args := <-ran:
				t.Errorf("the handler ran %q", args)
			default:
			}
		})
	}
}

// TestSignalBeforeDelivery: Ctrl-C while the client waits for a server
// that never takes the request: nothing ran, so the client dies of the
// signal as it would have without the server.
func TestSignalBeforeDelivery(t *testing.T) {
	sock := lifecycleSocket(t)
	pid := serverPID(t, sock)
	stopProcess(t, pid)
	defer syscall.Kill(pid, syscall.SIGCONT)
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd := clientCmd(t, sock, time.Second, time.Minute, "exit", "0")
	cmd.Stderr = errFile // not a pipe: see TestHungServer
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		b, _ := os.ReadFile(errFile.Name())
		t.Errorf("client ended with %v (%s), want death by SIGINT", cmd.ProcessState, b)
	}
}

// TestServerDropsInheritedFDs: a descriptor the first client inherited
// without close-on-exec (here the write end of a pipe its parent reads to
// the end) does not live on in the server it starts; the parent sees EOF
// when the client exits. The client's own copy keeps its flags.
func TestServerDropsInheritedFDs(t *testing.T) {
	sock := lifecycleSocket(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "exit", "0")
	cmd.ExtraFiles = []*os.File{devnull, pw} // fds 3 and 4 of the client
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if pid := lockPID(sock); pid == 0 || !alive(pid) {
		t.Fatal("no server started")
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(pr); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the server holds the pipe its first client inherited")
	}
}

// TestIgnoredSignalNotForwarded: a client started with SIGHUP ignored
// (nohup) does not forward a SIGHUP: the command runs on.
func TestIgnoredSignalNotForwarded(t *testing.T) {
	sock := lifecycleSocket(t)
	serverPID(t, sock)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("nohup", self, modeClient, sock, "3s", "1m", "--", "sleep", "500ms", "5")
	cmd.Dir = dir // nohup.out, if any, lands here
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGHUP)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Errorf("nohup'd client exited %d (%v), want the command's 5", code, cmd.ProcessState)
	}
}

// TestCatchSignalsAfter: with ClientOptions.CatchSignalsAfter, Ctrl-C
// before the delay kills the client and the server cancels the command
// (the client is gone); after the delay it is forwarded as usual.
func TestCatchSignalsAfter(t *testing.T) {
	sock := lifecycleSocket(t)
	serverPID(t, sock)
	t.Run("before", func(t *testing.T) {
		dir := t.TempDir()
		cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "block", dir)
		cmd.Env = append(os.Environ(), "SANDBOXD_TEST_CATCH_AFTER=1h")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the handler", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Errorf("client ended with %v, want death by SIGINT", cmd.ProcessState)
		}
		var cause []byte
		waitFor(t, "the command's cancellation", func() bool {
			cause, _ = os.ReadFile(filepath.Join(dir, "cause"))
			return len(cause) > 0
		})
		if string(cause) != ErrDisconnected.Error() {
			t.Errorf("cause %q, want %q", cause, ErrDisconnected)
		}
	})
	t.Run("after", func(t *testing.T) {
		cmd := clientCmd(t, sock, 3*time.Second, time.Minute, "signals", "1")
		cmd.Env = append(os.Environ(), "SANDBOXD_TEST_CATCH_AFTER=20ms")
		pr := startReady(t, cmd)
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		out, _ := io.ReadAll(pr)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || string(out) != "SIGINT\nsandboxd: client forwarded SIGINT\n" {
			t.Errorf("client exited %d (%v), handler saw %q", code, cmd.ProcessState, out)
		}
	})
}

// TestStartWhileAServerStops: a client that finds no socket while a
// stopping server still holds the lock (here: the test holds it for
// 200 ms) starts a server that exits with ErrRunning; once the lock is
// free, the client starts another, which serves.
func TestStartWhileAServerStops(t *testing.T) {
	sock := lifecycleSocket(t)
	lock, err := takeLock(sock + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		lock.Close()
	}()
	r := runClient(t, sock, "exit", "6")
	if r.code != 6 {
		t.Fatalf("client: %+v, want served (6)", r)
	}
	b, _ := os.ReadFile(sock + ".log")
	if !strings.Contains(string(b), "already running") {
		t.Errorf("no server saw the lock taken; log:\n%s", b)
	}
}

// stopProcess sends SIGSTOP to pid and waits until every thread of it is
// stopped (on a loaded machine a thread may run on for a while first).
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
				stopped++
			}
		}
		if stopped == len(ents) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d of %d threads stopped after 5 s", pid, stopped, len(ents))
		}
		time.Sleep(time.Millisecond)
	}
}
