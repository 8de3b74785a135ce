package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadyFlag and ReadyFD: a server the client starts gets the write end of
// a pipe as file descriptor ReadyFD, and ReadyFlag ReadyFD appended to
// ClientOptions.Server (e.g. `fluffy-core sandbox serve --socket S
// --ready-fd 3`). ReadyFile turns the flag's value into
// ServerOptions.Ready.
const (
	ReadyFlag = "--ready-fd"
	ReadyFD   = 3
)

// DefaultTimeout bounds, for a client, the start of a server and the
// time a server takes to answer a request with "started".
const DefaultTimeout = 3 * time.Second

// serverEnvKeys are the only environment variables a server started by a
// client inherits from it: a long-lived process must not keep the first
// client's secrets (API keys, tokens). Each call's handler gets its own
// client's environment in Request.Environ.
var serverEnvKeys = [...]string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_RUNTIME_DIR"}

// ServerEnv is the environment a client gives a server it starts: the
// variables PATH, HOME, USER, LOGNAME, TMPDIR and XDG_RUNTIME_DIR from
// environ, nothing else.
func ServerEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, want := range serverEnvKeys {
			if k == want {
				env = append(env, kv)
				break
			}
		}
	}
	return env
}

type ClientOptions struct {
	Socket string
	// Server is the argv that starts a server when none answers, e.g.
	// [core, "sandbox", "serve", "--socket", sock]. The client starts it
	// detached: in a new session, in /, stdin /dev/null, stdout and stderr
	// appended to the socket's path + ".log" (cut when it passes 1 MiB),
	// with the environment ServerEnv gives, and ReadyFlag ReadyFD
	// appended: fd ReadyFD is a pipe the server writes one byte to once it
	// listens (ServerOptions.Ready). The client waits for that byte, or
	// for a socket that answers, up to Timeout. Empty: never start one.
	Server []string
	// Timeout bounds the start of a server and the wait for a server to
	// take the request (DefaultTimeout).
	Timeout time.Duration
	// CatchSignalsAfter delays Call's catching of SIGINT, SIGTERM and
	// SIGHUP by this long (0: at once). A process's first signal.Notify
	// costs ~0.9 ms of CPU (the Go runtime starts a thread for signal
	// masks and makes a round trip to it per signal), more than a short
	// command's whole call; with a delay, a call that ends sooner never
	// pays it. A signal before the delay takes its default action: the
	// client dies of it, and the server, seeing the client gone, cancels
	// the command (its context's cause is ErrDisconnected instead of a
	// *SignalError). Only the exit status differs: the shell sees death
	// by the signal rather than the handler's code (both 130 for Ctrl-C
	// in a shell's $?).
	CatchSignalsAfter time.Duration
}

// callIO is what a call forwards: the client's standard input, the
// descriptors passed as the call's stdout and stderr, and the signals to
// forward (nil: none).
type callIO struct {
	stdin          io.Reader
	stdout, stderr int
	signals        <-chan os.Signal
}

// Call forwards req with the client's own fds 0, 1, 2 (stdin pumped, 1 and 2
// passed) and forwards SIGINT/SIGTERM/SIGHUP while waiting. It returns
// ErrUnavailable (wrapped, with why) only when the request was NOT delivered
// (no server and none could be started): then the caller may run the command
// itself. Once delivered, any failure (server died mid-call) is a plain error:
// the command's outcome is unknown and it must NOT be run again.
//
// A signal that arrives before the server took the request is forwarded
// with it; when the request then could not be delivered, Call raises it
// again with its default action (the process dies of it, as it would
// have without Call). With ErrUnavailable the three signals are back to
// their default handling; otherwise Call leaves them caught (and
// dropped): the caller is expected to exit with the reply at once.
//
// Standard input is read only when the server asks for it, one read at a
// time; a read under way when the call ends is left behind (the caller is
// expected to exit).
func Call(ctx context.Context, opts ClientOptions, req Request) (Reply, error) {
	sigs := make(chan os.Signal, 8)
	// A signal this process ignores (nohup's SIGHUP, SIGINT of a
	// background job started by a script) stays ignored: catching it
	// would forward it and stop a command its caller meant to shield.
	var catch []os.Signal
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			catch = append(catch, s)
		}
	}
	var mu sync.Mutex // guards caught and over
	caught, over := false, false
	startCatching := func() {
		mu.Lock()
		defer mu.Unlock()
		if !over && len(catch) > 0 { // Notify with none would catch every signal
			signal.Notify(sigs, catch...)
			caught = true
		}
	}
	var timer *time.Timer
	if opts.CatchSignalsAfter > 0 {
		timer = time.AfterFunc(opts.CatchSignalsAfter, startCatching)
	} else {
		startCatching()
	}
	r, err := call(ctx, opts, req, callIO{stdin: os.Stdin, stdout: 1, stderr: 2, signals: sigs})
	if timer != nil {
		timer.Stop()
	}
	mu.Lock()
	over = true
	mu.Unlock()
	if !caught || !errors.Is(err, ErrUnavailable) {
		// The caller exits with the reply: restoring the signals' default
		// handling would cost three more round trips to the runtime's
		// signal-mask thread (~0.4 ms of CPU in a fresh process).
		return r, err
	}
	signal.Stop(sigs)
	select {
	case s := <-sigs:
		if sig, ok := s.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), sig)
			time.Sleep(100 * time.Millisecond) // the default action takes the process
		}
	default:
	}
	return r, err
}

// unavailable wraps ErrUnavailable with why.
func unavailable(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, a...))
}

// errNotTaken: the server closed the connection before it took the call
// (it was stopping): worth one more try.
var errNotTaken = errors.New("the server closed the connection before taking the request")

func call(ctx context.Context, opts ClientOptions, req Request, cio callIO) (Reply, error) {
	if err := ctx.Err(); err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err) // nothing sent
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	for _, fd := range []int{cio.stdout, cio.stderr} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return Reply{}, unavailable("descriptor %d cannot be passed: %v", fd, err)
		}
	}
	body, err := encodeRequest(req)
	if err != nil {
		return Reply{}, unavailable("%v", err)
	}
	for try := 0; ; try++ {
		r, err := attempt(ctx, opts, body, cio)
		if errors.Is(err, errNotTaken) && try == 0 {
			continue // a server idling out as we connected: the next one takes it
		}
		return r, err
	}
}

// attempt connects (starting a server if need be), delivers the request
// and serves the call to its end.
func attempt(ctx context.Context, opts ClientOptions, body []byte, cio callIO) (Reply, error) {
	deadline := time.Now().Add(opts.Timeout)
	c, err := connect(opts.Socket, deadline)
	if err != nil && len(opts.Server) > 0 && isNoServer(err) {
		c, err = startServer(opts, deadline)
	}
	if err != nil {
		return Reply{}, unavailable("%v", err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	uid, pid, err := c.peerUID()
	if err != nil {
		return Reply{}, unavailable("%v", err)
	} else if uid != os.Geteuid() {
		return Reply{}, unavailable("the server on %s (pid %d) runs as uid %d, not as you (uid %d): refused", opts.Socket, pid, uid, os.Geteuid())
	}
	// Without the proof the request still goes, with a descriptor that
	// proves nothing in its place: the server names what differs (an
	// identity in /proc first), and refuses.
	proof, proofErr := reachProof(pid)
	if proofErr != nil {
		proof = cio.stderr
	} else {
		defer unix.Close(proof)
	}
	maxSend := c.maxSend()
	rights := unix.UnixRights(cio.stdout, cio.stderr, proof)
	for i, f := range requestFrames(body, maxSend) {
		var oob []byte
		if i == 0 {
			oob = rights
		}
		if err := c.send(f, oob); err != nil {
			// The server acts only on a whole request: nothing ran.
			if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
				return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, errNotTaken)
			}
			return Reply{}, unavailable("send the request to %s: %v", opts.Socket, err)
		}
	}

	// Server frames are small: a refused frame is the longest.
	buf := make([]byte, 2*maxMessage)
	if err := c.setReadDeadline(deadline); err != nil {
		return Reply{}, unavailable("%v", err)
	}
	f, err := recvFrame(c, buf)
	if proofErr != nil && err == nil && f.Type == frameRefused {
		f.Message += " (" + proofErr.Error() + ")"
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Close the receiving side first: from then on the server's
		// "started" cannot be sent, so it will not run the command.
		// A "started" already queued means it runs.
		_ = c.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RD) })
		_ = c.setReadDeadline(time.Now().Add(time.Millisecond))
		if f2, err2 := recvFrame(c, buf); err2 == nil && f2.Type == frameStarted {
			return Reply{}, fmt.Errorf("sandboxd: the server on %s took the request only after %v, as this client gave up waiting: the command may run, its outcome is unknown", opts.Socket, opts.Timeout)
		}
		return Reply{}, unavailable("the server on %s did not take the request within %v", opts.Socket, opts.Timeout)
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			// The server closed, or died (kill -9) with the connection
			// still in its backlog, before taking the request.
			return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, errNotTaken)
		}
		return Reply{}, unavailable("%v", err)
	}
	switch f.Type {
	case frameStarted:
	case frameRefused:
		if f.Version != Version {
			return Reply{}, unavailable("%v: %s", &VersionError{Got: f.Version, Want: Version}, f.Message)
		}
		return Reply{}, unavailable("the server refused the request: %s", f.Message)
	default:
		return Reply{}, unavailable("the server sent %s before started", f.Type)
	}

	// Delivered: from here on every failure is a plain error.
	if err := c.setReadDeadline(time.Time{}); err != nil {
		return Reply{}, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wants := make(chan uint32, 2)
	defer func() {
		close(done)
		close(wants)
		c.Close() // wakes the goroutines' sends; the stdin reader may stay in its Read
		closed = true
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if cio.signals != nil {
		wg.Go(func() {
			for {
				select {
				case s := <-cio.signals:
					if sig, ok := s.(syscall.Signal); ok && forwardedSignal(sig) {
						_ = c.sendFrame(frame{Type: frameSignal, Signal: sig})
					}
				case <-done:
					return
				}
			}
		})
	}
	go pumpStdin(c, cio.stdin, wants, maxSend-1)
	for {
		f, err := recvFrame(c, buf)
		if err != nil {
			if ctx.Err() != nil {
				return Reply{}, fmt.Errorf("sandboxd: call abandoned: %w", ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				return Reply{}, errors.New("sandboxd: the sandbox server ended the call without a reply (did it die?): the command's outcome is unknown")
			}
			return Reply{}, fmt.Errorf("sandboxd: the call's outcome is unknown: %w", err)
		}
		switch f.Type {
		case frameWant:
			select {
			case wants <- f.Want:
			default:
				return Reply{}, errors.New("sandboxd: protocol error: the server asked for standard input twice without waiting")
			}
		case frameReply:
			return Reply{Code: int(f.Code), HandOver: f.HandOver}, nil
		default:
			return Reply{}, fmt.Errorf("sandboxd: protocol error: unexpected %s frame during a call", f.Type)
		}
	}
}

// pumpStdin answers the server's wants: one read of in per want (of up to
// chunk bytes), sent as a stdin frame, or stdin-eof once in ends or fails.
// It returns when in ends or the connection is closed.
func pumpStdin(c *conn, in io.Reader, wants <-chan uint32, chunk int) {
	var buf []byte // allocated at the first want: most commands read no input
	for want := range wants {
		n := min(int(want), chunk)
		if buf == nil {
			buf = make([]byte, chunk)
		}
		for {
			k, err := in.Read(buf[:n])
			if k > 0 {
				if c.sendFrame(frame{Type: frameStdin, Data: buf[:k]}) != nil {
					return
				}
			}
			if err != nil {
				_ = c.sendFrame(frame{Type: frameStdinEOF})
				return
			}
			if k > 0 {
				break
			}
		}
	}
}

// recvFrame receives and decodes one frame from the server; io.EOF when
// the server closed the connection.
func recvFrame(c *conn, buf []byte) (frame, error) {
	n, oobn, err := c.recv(buf, nil)
	if err != nil {
		return frame{}, err
	}
	if n == 0 && oobn == 0 {
		return frame{}, io.EOF
	}
	f, err := decodeFrame(buf[:n])
	if err != nil {
		return frame{}, err
	}
	if f.Type.fromClient() {
		return frame{}, fmt.Errorf("sandboxd: protocol error: the server sent a %s frame", f.Type)
	}
	return f, nil
}

// connectError is connect's failure: ENOENT or ECONNREFUSED mean no
// server listens.
type connectError struct {
	Path string
	Err  error
}

func (e *connectError) Error() string { return "connect to " + e.Path + ": " + e.Err.Error() }
func (e *connectError) Unwrap() error { return e.Err }

func isNoServer(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// connect connects to the socket at path; a full backlog (EAGAIN) is
// retried until deadline.
func connect(path string, deadline time.Time) (*conn, error) {
	if len(path) > maxSocketPath {
		return nil, &connectError{Path: path, Err: syscall.ENAMETOOLONG}
	}
	for {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socket: %w", err)
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err == nil {
			return newConn(fd, path)
		}
		unix.Close(fd)
		if err != unix.EAGAIN || time.Now().After(deadline) {
			return nil, &connectError{Path: path, Err: err}
		}
		time.Sleep(time.Millisecond)
	}
}

// startServer starts opts.Server detached and connects to it, or to the
// server another client started meanwhile (a server that finds the lock
// taken exits without writing its ready byte; the client then waits for
// the other one's socket). When nothing answers and no server holds the
// lock either (the lock's holder was a server stopping just then), it
// starts another, up to three in all.
func startServer(opts ClientOptions, deadline time.Time) (*conn, error) {
	logPath := opts.Socket + ".log"
	for starts := 1; ; starts++ {
		if err := spawnServer(opts, deadline, logPath); err != nil {
			return nil, err
		}
		for polled := time.Now(); ; {
			c, err := connect(opts.Socket, deadline)
			if err == nil {
				return c, nil
			}
			if !isNoServer(err) || time.Now().After(deadline) {
				return nil, fmt.Errorf("%w (a server was started: see its log %s)", err, logPath)
			}
			if starts < 3 && time.Since(polled) > 20*time.Millisecond {
				if held, err := lockHeld(opts.Socket); err == nil && !held {
					break // nobody is about to listen: start one again
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// spawnServer starts one server and waits until it is ready or gone.
func spawnServer(opts ClientOptions, deadline time.Time, logPath string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		return fmt.Errorf("start the server: %w", err)
	}
	logf := openLog(logPath)
	argv := append(append([]string(nil), opts.Server...), ReadyFlag, strconv.Itoa(ReadyFD))
	files := []*os.File{devnull, logf, logf, w}
	if logf == nil {
		files[1], files[2] = devnull, devnull
	}
	var p *os.Process
	hideInheritedFDs(func() {
		p, err = os.StartProcess(argv[0], argv, &os.ProcAttr{
			Dir:   "/",
			Env:   ServerEnv(os.Environ()),
			Files: files,
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
	})
	w.Close()
	devnull.Close()
	if logf != nil {
		logf.Close()
	}
	if err != nil {
		return fmt.Errorf("start the server %s: %w", argv[0], err)
	}
	go p.Wait() // reap it whenever it exits, if this process lives that long
	_ = r.SetReadDeadline(deadline)
	var b [1]byte
	n, err := r.Read(b[:])
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the server %s (pid %d) did not get ready within %v (its log: %s)", argv[0], p.Pid, opts.Timeout, logPath)
	}
	// Ready, or gone (most likely: another server holds the lock and is
	// about to listen).
	return nil
}

// openLog opens the log of started servers for appending, cut when it
// passed 1 MiB; nil if it cannot be opened.
func openLog(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 1<<20 {
		_ = f.Truncate(0)
	}
	return f
}

// hideInheritedFDs runs start with every descriptor above 2 that this
// process inherited without close-on-exec (a shell's `exec 4>file`, a
// jobserver's pipe) marked close-on-exec, and restores them after. A
// long-lived server must not keep such a descriptor: a parent waiting for
// the end of a pipe would wait for the server's idle exit. Go opens its
// own descriptors close-on-exec already; the client runs no other
// goroutine that starts processes meanwhile.
func hideInheritedFDs(start func()) {
	var marked []int
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			fd, err := strconv.Atoi(e.Name())
			if err != nil || fd <= 2 {
				continue
			}
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
					marked = append(marked, fd)
				}
			}
		}
	}
	start()
	for _, fd := range marked {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags&^unix.FD_CLOEXEC)
		}
	}
}

// reachProof opens the server's /proc/PID/environ, which the kernel lets
// a process open only with ptrace read access to the server: a process
// in a landlock domain the server is not in (or confined so by another
// LSM) is refused. The server checks that the descriptor is its own
// entry (see proveReach): such a client, whose confinement /proc does not
// show, cannot have commands run outside it.
func reachProof(serverPID int) (int, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(serverPID)+"/environ", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open the server's /proc/%d/environ (%w): this process is confined in a way /proc does not show (a landlock domain, an LSM profile), so the server must not run its commands", serverPID, err)
	}
	return fd, nil
}
