package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Server defaults.
const (
	DefaultIdle  = 10 * time.Minute
	DefaultGrace = 10 * time.Second
	// requestTimeout bounds the time a client takes to send its whole
	// request after connecting.
	requestTimeout = 5 * time.Second
)

type ServerOptions struct {
	Socket string        // the socket path (from SocketPath)
	Idle   time.Duration // exit after this long with no call in flight (0: DefaultIdle)
	Logger *slog.Logger  // nil: discard
	Ready  *os.File      // optional: one byte is written once listening, then it is closed
	// Grace bounds the wait for calls in flight once the server stops
	// (ctx ended): then their contexts are cancelled (cause ErrShutdown)
	// and Serve waits up to Grace again before it returns anyway
	// (0: DefaultGrace).
	Grace time.Duration
}

// ReadyFile returns the ready pipe a client passed as descriptor fd (the
// value of ReadyFlag), checking that it is an open pipe.
func ReadyFile(fd int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("sandboxd: ready descriptor %d: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("sandboxd: ready descriptor %d is not a pipe", fd)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "ready"), nil
}

// Serve takes the socket's lock (another live server: return ErrRunning at
// once), binds (replacing a stale socket file), serves until ctx ends or idle,
// waits for calls in flight, removes the socket.
//
// The lock is the socket's path + ".lock" (flock; it holds the server's
// pid for information). The socket is bound under a temporary name, set to
// 0600 and listening, then renamed into place, so a client never finds a
// socket that does not answer yet. When the server stops it closes the
// listener, removes the socket and releases the lock before it waits for
// the calls in flight, so a new server can start meanwhile. Serve returns
// nil when it stopped for ctx or idleness, an error when it could not
// serve (lock, bind, accept) or calls outlived their cancellation.
func Serve(ctx context.Context, opts ServerOptions, h Handler) error {
	if opts.Socket == "" || h == nil {
		return errors.New("sandboxd: Serve needs a socket and a handler")
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("socket", opts.Socket)

	id, err := readIdentity("/proc/self")
	if err != nil {
		return err
	}
	lock, err := takeLock(opts.Socket + ".lock")
	if err != nil {
		return err
	}
	lockHeld := true
	unlock := func() {
		if lockHeld {
			lock.Close()
			lockHeld = false
		}
	}
	defer unlock()
	ln, ino, err := listen(opts.Socket)
	if err != nil {
		return err
	}
	log.Info("sandbox server listening", "pid", os.Getpid(), "idle", opts.Idle)
	go func() {
		// Other builds' servers leave their files here.
		removed, err := sweepStale(opts.Socket, staleAfter, time.Now())
		if len(removed) > 0 {
			log.Info("removed the files of servers gone for a day", "sockets", removed)
		}
		if err != nil {
			log.Warn("removing the files of servers gone for a day", "err", err)
		}
	}()
	if opts.Ready != nil {
		if _, err := opts.Ready.Write([]byte{1}); err != nil {
			log.Warn("could not signal readiness", "err", err)
		}
		opts.Ready.Close()
	}

	callBase, cancelCalls := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelCalls(ErrShutdown)
	s := &server{uid: os.Geteuid(), id: id, log: log, h: h, base: callBase}
	s.idle = newIdler(opts.Idle)
	stopped := make(chan string, 1)
	acceptDone := make(chan struct{}) // the accept loop ended on its own
	go func() {
		select {
		case <-ctx.Done():
			stopped <- "stopped"
		case <-s.idle.fired:
			stopped <- "idle"
		case <-acceptDone:
			return
		}
		ln.Close() // wakes Accept
	}()

	var failed error
	for {
		fd, err := ln.accept()
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				break
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
				log.Error("accept", "err", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) {
				continue
			}
			log.Error("accept failed, stopping", "err", err)
			failed = fmt.Errorf("sandboxd: accept on %s: %w", opts.Socket, err)
			ln.Close()
			break
		}
		c, err := newConn(fd, "sandboxd-call")
		if err != nil {
			log.Error("accepted connection", "err", err)
			continue
		}
		s.idle.begin()
		s.calls.Go(func() {
			defer s.idle.end()
			s.serveConn(c)
		})
	}
	close(acceptDone)
	why := "failed"
	select {
	case why = <-stopped:
	default:
	}
	// Give the socket up first, so that the next client starts a new server
	// instead of waiting for this one's calls.
	if fi, err := os.Lstat(opts.Socket); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino == ino {
			os.Remove(opts.Socket)
		}
	}
	unlock()
	s.idle.stop()
	log.Info("sandbox server stopping", "why", why)

	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
		return failed
	case <-time.After(opts.Grace):
	}
	log.Warn("calls still running after the grace period: cancelling them", "grace", opts.Grace)
	cancelCalls(ErrShutdown)
	select {
	case <-done:
		return failed
	case <-time.After(opts.Grace):
		return errors.Join(failed, errors.New("sandboxd: calls still running after they were cancelled; abandoning them"))
	}
}

// takeLock opens and flocks path; ErrRunning when another process holds
// it.
func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			return nil, fmt.Errorf("%w (pid %s, lock %s)", ErrRunning, strings.TrimSpace(string(b)), path)
		}
		return nil, fmt.Errorf("sandboxd: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// listener is a listening SOCK_SEQPACKET socket.
type listener struct{ *conn }

func (l *listener) accept() (int, error) {
	var nfd int
	var aerr error
	err := l.rc.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return aerr != unix.EAGAIN
	})
	if err == nil {
		err = aerr
	}
	return nfd, l.closedErr(err)
}

// listen binds path + ".new", restricts it to 0600, listens and renames it
// over path (replacing a stale socket). The caller holds the lock. It
// returns the socket file's inode.
func listen(path string) (*listener, uint64, error) {
	tmp := path + ".new"
	fail := func(err error) (*listener, uint64, error) {
		return nil, 0, fmt.Errorf("sandboxd: listen on %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	_ = os.Remove(tmp)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: tmp}); err != nil {
		unix.Close(fd)
		return fail(err)
	}
	var st unix.Stat_t
	err = unix.Chmod(tmp, 0o600)
	if err == nil {
		err = unix.Listen(fd, 128)
	}
	if err == nil {
		err = unix.Stat(tmp, &st)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return fail(err)
	}
	c, err := newConn(fd, filepath.Base(path))
	if err != nil {
		return fail(err)
	}
	return &listener{c}, st.Ino, nil
}

// idler fires once no call has been in flight for d.
type idler struct {
	mu      sync.Mutex // guards the fields below
	n       int
	stopped bool
	timer   *time.Timer
	d       time.Duration
	once    sync.Once
	fired   chan struct{}
}

func newIdler(d time.Duration) *idler {
	i := &idler{d: d, fired: make(chan struct{})}
	i.timer = time.AfterFunc(d, func() {
		i.mu.Lock()
		defer i.mu.Unlock()
		if i.n == 0 && !i.stopped {
			i.once.Do(func() { close(i.fired) })
		}
	})
	return i
}

func (i *idler) begin() {
	i.mu.Lock()
	i.n++
	i.timer.Stop()
	i.mu.Unlock()
}

func (i *idler) end() {
	i.mu.Lock()
	i.n--
	if i.n == 0 && !i.stopped {
		i.timer.Reset(i.d)
	}
	i.mu.Unlock()
}

func (i *idler) stop() {
	i.mu.Lock()
	i.stopped = true
	i.timer.Stop()
	i.mu.Unlock()
}

type server struct {
	uid   int
	id    identity // a client must have the same
	log   *slog.Logger
	h     Handler
	base  context.Context // calls' parent: cancelled after the grace period
	idle  *idler
	calls sync.WaitGroup
	bufs  sync.Pool // *[]byte of MaxFrame+1: a frame, and a byte to tell one too long
}

// buffer is a receive buffer from the pool.
func (s *server) buffer() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, MaxFrame+1)
	return &b
}

// serveConn serves one connection: checks the peer, reads the request,
// says "started", runs the handler and replies.
func (s *server) serveConn(c *conn) {
	defer c.Close()
	uid, pid, err := c.peerUID()
	if err != nil {
		s.log.Warn("connection refused: no peer credentials", "err", err)
		return
	}
	log := s.log.With("client_pid", pid)
	if uid != s.uid {
		log.Warn("connection refused: client of another user", "client_uid", uid)
		return
	}
	_ = c.setReadDeadline(time.Now().Add(requestTimeout))
	bp := s.buffer()
	req, fds, err := readRequest(c, *bp)
	s.bufs.Put(bp)
	if err != nil {
		closeFDs(fds)
		log.Warn("request refused", "err", err)
		_ = c.sendFrame(frame{Type: frameRefused, Version: Version, Message: truncate(err.Error(), maxMessage)})
		return
	}
	why := peerDiffers(c, pid, s.id)
	if why == "" {
		why = proveReach(fds[2])
	}
	unix.Close(fds[2])
	if why != "" {
		closeFDs(fds[:2])
		log.Warn("request refused: the client differs from the server", "in", why)
		_ = c.sendFrame(frame{Type: frameRefused, Version: Version, Message: "the client differs from the server in: " + why})
		return
	}
	stdout, stderr := os.NewFile(uintptr(fds[0]), "client-stdout"), os.NewFile(uintptr(fds[1]), "client-stderr")
	defer stdout.Close()
	defer stderr.Close()
	_ = c.setReadDeadline(time.Time{})

	ctx, cancel := context.WithCancelCause(s.base)
	defer cancel(nil)
	sigs := make(chan syscall.Signal, 8)
	in := &stdinPipe{c: c}
	in.cond = sync.NewCond(&in.mu)
	defer in.end(io.ErrClosedPipe)

	// "started" is sent before the handler runs, and it runs only if
	// that worked: a client that never saw it knows nothing ran.
	if err := c.sendFrame(frame{Type: frameStarted}); err != nil {
		log.Info("client gone before its call started", "err", err)
		return
	}
	// replied: the reply went out (maybe early, Incoming.Reply): the
	// client's departure no longer cancels the call.
	var replied atomic.Bool
	var reader sync.WaitGroup
	reader.Go(func() { s.readCall(c, log, in, sigs, cancel, &replied) })
	defer reader.Wait()
	defer c.Close() // stops the reader (after the reply was sent)

	start := time.Now()
	var once sync.Once
	sendReply := func(reply Reply) {
		once.Do(func() {
			replied.Store(true)
			code := reply.Code
			if code < math.MinInt32 || code > math.MaxInt32 {
				log.Warn("exit code out of range, replying 1", "code", code)
				code = 1
			}
			if err := c.sendFrame(frame{Type: frameReply, Code: int32(code), HandOver: reply.HandOver}); err != nil {
				log.Info("reply not delivered", "err", err)
			}
			log.Debug("call answered", "code", code, "handover", reply.HandOver, "took", time.Since(start), "cause", context.Cause(ctx))
		})
	}
	early := func(reply Reply) {
		sendReply(reply)
		// The client is gone or going: nothing more reaches it.
		in.end(io.ErrClosedPipe)
		stdout.Close()
		stderr.Close()
	}
	reply, ok := s.run(ctx, log, &Incoming{Request: req, Stdin: in, Stdout: stdout, Stderr: stderr, Signals: sigs, early: early})
	if !ok {
		return // the client reports a call ended without a reply (unless it had one)
	}
	sendReply(reply)
	log.Debug("call served", "took", time.Since(start))
}

// run calls the handler; a panic is logged and reported as no reply.
func (s *server) run(ctx context.Context, log *slog.Logger, c *Incoming) (r Reply, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			ok = false
		}
	}()
	return s.h(ctx, c), true
}

// readCall reads the client's frames during a call until the connection
// ends: stdin data into in, signals into sigs and as the context's cause.
// A client that breaks the protocol is treated as gone.
func (s *server) readCall(c *conn, log *slog.Logger, in *stdinPipe, sigs chan<- syscall.Signal, cancel context.CancelCauseFunc, replied *atomic.Bool) {
	bp := s.buffer()
	defer s.bufs.Put(bp)
	buf := *bp
	oob := make([]byte, unix.CmsgSpace(4*4))
	gone := func(why string, err error) {
		if replied.Load() {
			return // answered early: the client was expected to leave
		}
		if why != "" {
			log.Warn(why, "err", err)
		}
		cancel(ErrDisconnected)
		in.end(ErrDisconnected)
	}
	for {
		n, oobn, err := c.recv(buf, oob)
		if oobn > 0 {
			closeFDs(parseRights(oob[:oobn]))
			if err == nil {
				gone("client sent descriptors during a call", nil)
				return
			}
		}
		if errors.Is(err, os.ErrClosed) {
			return // the call ended
		}
		if err != nil {
			gone("", err)
			return
		}
		if n == 0 {
			if !replied.Load() {
				log.Info("client disconnected during its call")
			}
			gone("", nil)
			return
		}
		f, err := decodeFrame(buf[:n])
		if err != nil {
			gone("malformed frame from client", err)
			return
		}
		switch f.Type {
		case frameStdin:
			if !in.push(f.Data) {
				gone("client sent standard input nobody asked for", nil)
				return
			}
		case frameStdinEOF:
			in.end(io.EOF)
		case frameSignal:
			cancel(&SignalError{Signal: f.Signal})
			select {
			case sigs <- f.Signal:
			default:
			}
		default:
			gone("unexpected frame from client", errors.New(f.Type.String()))
			return
		}
	}
}

// readRequest reads the request frames and the descriptors the first one
// carries (exactly two: the client's stdout and stderr), receiving into
// buf (MaxFrame+1 bytes). The returned fds are the caller's, also with an
// error.
func readRequest(c *conn, buf []byte) (Request, []int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	var fds []int
	var body []byte
	var total int
	for {
		n, oobn, err := c.recv(buf, oob)
		if oobn > 0 {
			fds = append(fds, parseRights(oob[:oobn])...)
		}
		if err != nil {
			return Request{}, fds, err
		}
		if n == 0 {
			return Request{}, fds, errors.New("client closed the connection before its request ended")
		}
		f, err := decodeFrame(buf[:n])
		if err != nil {
			return Request{}, fds, err
		}
		switch {
		case body == nil && f.Type == frameRequest:
			if len(fds) != 3 {
				return Request{}, fds, fmt.Errorf("request carries %d descriptors, want 3 (stdout, stderr and the server's /proc/PID/environ)", len(fds))
			}
			total = int(f.Total)
			body = make([]byte, 0, min(total, 1<<20))
			body = append(body, f.Data...)
		case body != nil && f.Type == frameRequestMore:
			if oobn > 0 {
				return Request{}, fds, errors.New("descriptors on a request-more frame")
			}
			if len(body)+len(f.Data) > total {
				return Request{}, fds, errors.New("request longer than announced")
			}
			body = append(body, f.Data...)
		default:
			return Request{}, fds, fmt.Errorf("unexpected %s frame while reading the request", f.Type)
		}
		if len(body) == total {
			r, err := decodeRequest(body)
			return r, fds, err
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// stdinPipe is a call's standard input: Read asks the client for a chunk
// (one want at a time) and waits for it.
type stdinPipe struct {
	c     *conn
	mu    sync.Mutex // guards the fields below
	cond  *sync.Cond
	buf   []byte
	asked bool  // a want is outstanding
	err   error // set once: io.EOF, ErrDisconnected, io.ErrClosedPipe
}

func (p *stdinPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			return n, nil
		}
		if p.err != nil {
			return 0, p.err
		}
		if !p.asked {
			p.asked = true
			p.mu.Unlock()
			err := p.c.sendFrame(frame{Type: frameWant, Want: MaxChunk})
			p.mu.Lock()
			if err != nil && p.err == nil {
				p.err = ErrDisconnected
			}
			continue
		}
		p.cond.Wait()
	}
}

// push adds a chunk the client sent; false when none was asked for.
func (p *stdinPipe) push(data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.asked || p.err != nil {
		return false
	}
	p.asked = false
	p.buf = append(p.buf[:0], data...)
	p.cond.Broadcast()
	return true
}

// end makes Read return err once the buffer is drained (the first end
// wins).
func (p *stdinPipe) end(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
}

// peerDiffers compares the identity of the peer process pid (from
// SO_PEERCRED) with want, and says in what it differs ("" if in nothing).
// A peer it cannot check differs.
// With SO_PEERPIDFD (Linux 6.5+) the peer is checked to be still alive
// after its /proc entry was read, so that a recycled pid cannot stand in
// for it.
func peerDiffers(c *conn, pid int, want identity) string {
	if pid <= 0 {
		return "pid namespace (its pid is not visible)"
	}
	pidfd := -1
	_ = c.rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = v
		}
	})
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	id, err := readIdentity("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return "identity (unreadable: " + err.Error() + ")"
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return "identity (it exited while being checked)"
		}
	}
	return want.diff(id)
}

// proveReach checks the client's proof (reachProof): fd must be this
// process's own /proc/PID/environ, which only a process with ptrace read
// access to this one can open. It says in what the client differs when
// it is not ("" when it is). A landlock domain is not in /proc: this is
// how a client in one the server is not in is told apart.
func proveReach(fd int) string {
	const what = "confinement /proc does not show (it could not open this server's /proc entry: a landlock domain or an LSM profile)"
	var got, want unix.Stat_t
	if unix.Fstat(fd, &got) != nil || unix.Stat("/proc/self/environ", &want) != nil {
		return what
	}
	var sfs unix.Statfs_t
	if unix.Fstatfs(fd, &sfs) != nil || sfs.Type != unix.PROC_SUPER_MAGIC || got.Dev != want.Dev || got.Ino != want.Ino {
		return what
	}
	return ""
}
