package ipc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Handler answers one request. The context is canceled when the client
// cancels the request, disconnects, or the server shuts down without
// grace. The result is marshalled as JSON (nil gives null). Return an
// *Error to choose the code the client sees; any other error becomes
// CodeInternal carrying err's message (the peer is the same user, so the
// message is not a leak).
type Handler func(ctx context.Context, r *Request) (any, error)

// Request is one call as a handler sees it.
type Request struct {
	ID     uint64
	Method string
	Params json.RawMessage
	Peer   *Peer
}

// Bind decodes the params into v strictly (unknown fields are errors). An
// absent params field decodes as {}. Errors are *Error with
// CodeInvalidParams, ready to return.
func (r *Request) Bind(v any) error {
	p := r.Params
	if len(p) == 0 || string(p) == "null" {
		p = json.RawMessage("{}")
	}
	if err := DecodeStrict(p, v); err != nil {
		return Errorf(CodeInvalidParams, "%s: %v", r.Method, err)
	}
	return nil
}

// Mux is the message catalogue: the handler registry by method name. The
// kernel registers its methods before serving; Handle after Serve has
// started is a race the caller must avoid.
type Mux struct {
	handlers map[string]Handler
}

// NewMux returns an empty registry. The built-in methods (ping, subscribe,
// unsubscribe) are answered by the server itself and cannot be registered.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for method. It refuses a malformed name, a built-in
// method, a nil handler or a duplicate.
func (m *Mux) Handle(method string, h Handler) error {
	switch {
	case !ValidMethod(method):
		return fmt.Errorf("ipc: method %q is not a dotted lower-case name", method)
	case method == MethodPing || method == MethodSubscribe || method == MethodUnsubscribe:
		return fmt.Errorf("ipc: method %q is built in", method)
	case h == nil:
		return fmt.Errorf("ipc: nil handler for %q", method)
	case m.handlers[method] != nil:
		return fmt.Errorf("ipc: method %q registered twice", method)
	}
	m.handlers[method] = h
	return nil
}

// Methods lists the registered methods, sorted, built-ins included.
func (m *Mux) Methods() []string {
	out := []string{MethodPing, MethodSubscribe, MethodUnsubscribe}
	for k := range m.handlers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Refusal describes a connection the server turned away because its peer
// is another user.
type Refusal struct {
	Time   time.Time
	Peer   Cred   // as SO_PEERCRED reported it
	Want   uint32 // the uid the server accepts
	Reason string
}

// RefusalRecorder is told of every refused connection, so the kernel can
// audit it. The connection is refused whatever RecordRefusal returns; an
// error is logged. It is called from the connection's goroutine and
// should not block for long.
type RefusalRecorder interface {
	RecordRefusal(ctx context.Context, r Refusal) error
}

// ServerOptions configure a Server. Mux is required; zero values elsewhere
// take the documented defaults.
type ServerOptions struct {
	Mux      *Mux            // required
	Name     string          // sent in the hello, e.g. "fluffy-kernel/1.0"
	Logger   *slog.Logger    // nil discards
	Refusals RefusalRecorder // optional; told of every refused peer
	// MaxFrame is the largest frame accepted (DefaultMaxFrame).
	MaxFrame int
	// QueueLen bounds each connection's outgoing queue, in frames (256).
	// When a frame does not fit, the peer is a slow consumer and the
	// server closes its connection: the server never waits for a peer.
	QueueLen int
	// WriteTimeout bounds one frame write (10s); a peer that does not
	// read for that long is disconnected as a slow consumer.
	WriteTimeout time.Duration
	// MaxInFlight bounds concurrent requests per connection (32); beyond
	// it requests are answered CodeUnavailable at once (the reader never
	// blocks, so cancels always get through).
	MaxInFlight int
	// HandshakeTimeout bounds the wait for the client's hello (5s).
	HandshakeTimeout time.Duration
	// IdleTimeout, when positive, shuts the server down once it has had
	// no connection for that long; Serve then returns ErrIdle.
	IdleTimeout time.Duration
	// IdleGrace, when longer than IdleTimeout, replaces it until the
	// first connection: a server started for a client gives that client
	// time to arrive.
	IdleGrace time.Duration
}

// Server lifecycle errors, returned by Serve.
var (
	ErrServerClosed = errors.New("ipc: server closed")
	ErrIdle         = errors.New("ipc: server idle")
)

// Server serves the protocol on a unix listener. Only peers running as
// the server's own effective uid are served.
type Server struct {
	opts ServerOptions
	log  *slog.Logger
	uid  uint32
	pid  int

	mu       sync.Mutex // guards the fields below
	ln       *Listener
	conns    map[*conn]struct{}
	nextConn uint64
	closing  bool
	idle     bool
	idleT    *time.Timer
	done     chan struct{}  // closed when shutdown begins
	conng    sync.WaitGroup // connection goroutines; Add only while !closing
	// abandoned is closed when a Shutdown's ctx ended before every
	// handler returned: Serve then returns without waiting for handlers
	// that ignore their canceled context (stuck in a system call), so
	// the process can exit.
	abandoned   chan struct{}
	abandonOnce sync.Once
}

// abandonGrace is how long Serve still waits, once Shutdown gave up, for
// the handlers it canceled.
const abandonGrace = time.Second

// NewServer checks the options and returns a server.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Mux == nil {
		return nil, errors.New("ipc: ServerOptions.Mux is required")
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	opts.MaxFrame = clampMax(opts.MaxFrame)
	if opts.QueueLen <= 0 {
		opts.QueueLen = 256
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 32
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, uid: uint32(os.Geteuid()), pid: os.Getpid(),
		conns: map[*conn]struct{}{}, done: make(chan struct{}), abandoned: make(chan struct{})}, nil
}

// Serve accepts connections on ln until Shutdown (ErrServerClosed) or the
// idle timeout (ErrIdle), and returns once every connection has ended
// (Shutdown bounds that). It closes ln, which removes the socket file.
func (s *Server) Serve(ln *Listener) error {
	s.mu.Lock()
	if s.closing || s.ln != nil {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.armIdle()
	s.mu.Unlock()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing, idle := s.closing, s.idle
			s.mu.Unlock()
			if closing {
				// Return once every connection has been drained or
				// dropped, so the caller may exit; or once Shutdown
				// gave up on handlers that do not return.
				all := make(chan struct{})
				go func() {
					s.conng.Wait()
					close(all)
				}()
				select {
				case <-all:
				case <-s.abandoned:
					// Handlers that honour their canceled context
					// return within abandonGrace.
					select {
					case <-all:
					case <-time.After(abandonGrace):
						s.mu.Lock()
						n := len(s.conns)
						s.mu.Unlock()
						s.log.Error("ipc: stopped with handlers still running: they ignored their canceled context", "connections", n)
					}
				}
				if idle {
					return ErrIdle
				}
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
				errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				// Transient: out of descriptors or memory for a moment.
				s.log.Warn("ipc: accept failed, retrying", "err", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			s.shutdownNow()
			return fmt.Errorf("ipc: accept: %w", err)
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conng.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.conng.Done()
			s.serveConn(c)
		}()
	}
}

// armIdle starts the idle timer when there are no connections. s.mu held.
func (s *Server) armIdle() {
	if s.opts.IdleTimeout <= 0 || len(s.conns) > 0 || s.closing {
		return
	}
	if s.idleT != nil {
		s.idleT.Stop()
	}
	d := s.opts.IdleTimeout
	if s.nextConn == 0 {
		d = max(d, s.opts.IdleGrace)
	}
	s.idleT = time.AfterFunc(d, func() {
		s.mu.Lock()
		if len(s.conns) > 0 || s.closing {
			s.mu.Unlock()
			return
		}
		s.idle = true
		s.mu.Unlock()
		s.log.Info("ipc: idle, shutting down", "idle_timeout", s.opts.IdleTimeout)
		_ = s.Shutdown(context.Background())
	})
}

// Conns returns the number of served connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Served returns the number of connections accepted since the start
// (refused peers not counted).
func (s *Server) Served() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextConn
}

// Done is closed when the server begins shutting down.
func (s *Server) Done() <-chan struct{} { return s.done }

// Shutdown stops accepting, lets in-flight requests finish, tells every
// client with a final shutting_down error frame and closes. New requests
// meanwhile get CodeShuttingDown. When ctx ends first, handlers are
// canceled, connections closed at once, and ctx's error returned; Serve
// then returns without waiting for handlers that ignore the cancellation
// (they are abandoned, so a process can exit on time). A handler must not
// wait for Shutdown (it waits for the handler): start it in a goroutine.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.done)
		if s.idleT != nil {
			s.idleT.Stop()
		}
		if s.ln != nil {
			s.ln.Close()
		}
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.drain(ctx)
		}()
	}
	wg.Wait()
	all := make(chan struct{})
	go func() {
		s.conng.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-ctx.Done():
		s.abandonOnce.Do(func() { close(s.abandoned) })
	}
	return ctx.Err()
}

func (s *Server) shutdownNow() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.Shutdown(ctx)
}

// Publish sends an event to every connection subscribed to topic and
// returns how many it was queued for. A connection whose queue is full is
// closed (slow consumer) and not counted.
func (s *Server) Publish(topic string, data any) (int, error) {
	b, err := eventFrame(topic, data, s.opts.MaxFrame)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.subscribed(topic) && c.enqueue(b, false) {
			n++
		}
	}
	return n, nil
}

func eventFrame(topic string, data any, maxFrame int) ([]byte, error) {
	if !ValidMethod(topic) {
		return nil, fmt.Errorf("ipc: topic %q is not a dotted lower-case name", topic)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("ipc: event %s: %w", topic, err)
	}
	return frameOf(&Message{Type: TypeEvent, Topic: topic, Data: raw}, maxFrame)
}

func frameOf(m *Message, maxFrame int) ([]byte, error) {
	b, err := encode(m)
	if err != nil {
		return nil, err
	}
	if len(b) > maxFrame {
		return nil, &FrameSizeError{Size: uint32(min(len(b), 1<<32-1)), Max: uint32(maxFrame)}
	}
	return AppendFrame(make([]byte, 0, HeaderSize+len(b)), b), nil
}

// Peer is the other end of a served connection.
type Peer struct {
	ID      uint64 // connection number, unique per server
	Cred    Cred   // from SO_PEERCRED
	Name    string // from the client's hello
	Version int    // negotiated protocol version
	c       *conn
}

// Notify pushes an event to this peer alone, subscribed or not. It
// reports false when the peer is gone or was too slow (and is now gone).
func (p *Peer) Notify(topic string, data any) (bool, error) {
	b, err := eventFrame(topic, data, p.c.s.opts.MaxFrame)
	if err != nil {
		return false, err
	}
	return p.c.enqueue(b, false), nil
}

type outFrame struct {
	b    []byte
	last bool // close the connection after writing it
}

// conn is one served connection: a reader (serveConn), a writer, and one
// goroutine per in-flight request.
type conn struct {
	s    *Server
	nc   *net.UnixConn
	br   *bufio.Reader
	peer Peer
	out  chan outFrame
	sem  chan struct{}
	ctx  context.Context // canceled when the connection closes
	stop context.CancelFunc

	closeOnce sync.Once
	closed    chan struct{}
	flushed   chan struct{} // the final frame is written
	handlers  sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	inflight map[uint64]context.CancelFunc
	subs     []string
	final    bool // a last frame is queued; nothing more is sent
}

func (s *Server) serveConn(nc *net.UnixConn) {
	cred, err := PeerCred(nc)
	if err != nil {
		s.log.Warn("ipc: no peer credentials, refusing", "err", err)
		nc.Close()
		return
	}
	if cred.UID != s.uid {
		s.refuse(nc, cred)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 16<<10), out: make(chan outFrame, s.opts.QueueLen), sem: make(chan struct{}, s.opts.MaxInFlight),
		ctx: ctx, stop: stop, closed: make(chan struct{}), flushed: make(chan struct{}), inflight: map[uint64]context.CancelFunc{}}
	c.peer = Peer{Cred: cred, c: c}
	s.mu.Lock()
	if s.closing { // accepted as shutdown began: the client retries
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.nextConn++
	c.peer.ID = s.nextConn
	s.conns[c] = struct{}{}
	if s.idleT != nil {
		s.idleT.Stop()
	}
	s.mu.Unlock()
	go c.writeLoop()
	c.readLoop()
	c.mu.Lock()
	final := c.final
	c.mu.Unlock()
	if final {
		// Let the writer deliver the last frame, and swallow what the
		// peer still sends: closing a unix socket with unread input
		// resets the peer, which would lose the frame.
		select {
		case <-c.flushed:
			_ = nc.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.CopyN(io.Discard, nc, int64(s.opts.MaxFrame))
		case <-c.closed:
		case <-time.After(s.opts.WriteTimeout):
		}
	}
	c.close()
	c.handlers.Wait()
	s.mu.Lock()
	delete(s.conns, c)
	s.armIdle()
	s.mu.Unlock()
}

func (s *Server) refuse(nc *net.UnixConn, cred Cred) {
	r := Refusal{Time: time.Now(), Peer: cred, Want: s.uid,
		Reason: fmt.Sprintf("peer uid %d is not the kernel's uid %d", cred.UID, s.uid)}
	s.log.Warn("ipc: refused a peer of another user", "peer_uid", cred.UID, "peer_pid", cred.PID, "want_uid", s.uid)
	if s.opts.Refusals != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.opts.Refusals.RecordRefusal(ctx, r); err != nil {
			s.log.Error("ipc: recording a refused peer failed", "err", err)
		}
		cancel()
	}
	if b, err := frameOf(&Message{Type: TypeError, Error: Errorf(CodePermissionDenied, "%s", r.Reason)}, s.opts.MaxFrame); err == nil {
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(b)
	}
	nc.Close()
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.stop()
		c.nc.Close()
	})
}

// enqueue queues a framed message without ever blocking. A full queue
// marks a slow consumer: the connection is closed and enqueue reports
// false.
func (c *conn) enqueue(b []byte, last bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.final {
		return false
	}
	select {
	case <-c.closed:
		return false
	default:
	}
	select {
	case c.out <- outFrame{b, last}:
		c.final = last
		return true
	default:
		c.s.log.Warn("ipc: slow consumer, disconnecting", "conn", c.peer.ID, "pid", c.peer.Cred.PID, "queue", cap(c.out))
		c.final = true
		go c.close()
		return false
	}
}

func (c *conn) send(m *Message) bool {
	b, err := frameOf(m, c.s.opts.MaxFrame)
	if err != nil {
		if m.Type != TypeResponse {
			c.s.log.Error("ipc: cannot encode a message", "type", m.Type, "err", err)
			return false
		}
		b, _ = frameOf(&Message{Type: TypeResponse, ID: m.ID, Error: Errorf(CodeInternal, "result not sendable: %v", err)}, c.s.opts.MaxFrame)
	}
	return c.enqueue(b, false)
}

// sendFatal queues a final error frame; the writer closes after it.
func (c *conn) sendFatal(e *Error) {
	b, err := frameOf(&Message{Type: TypeError, Error: e}, c.s.opts.MaxFrame)
	if err != nil || !c.enqueue(b, true) {
		c.close()
	}
}

// writeLoop writes queued frames, batching what is already queued into
// one writev.
func (c *conn) writeLoop() {
	var batch net.Buffers
	for {
		var f outFrame
		select {
		case f = <-c.out:
		case <-c.closed:
			return
		}
		batch = append(batch[:0], f.b)
		size := len(f.b)
	more:
		for !f.last && size < 256<<10 {
			select {
			case f = <-c.out:
				batch = append(batch, f.b)
				size += len(f.b)
			default:
				break more
			}
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
		if _, err := batch.WriteTo(c.nc); err != nil {
			c.s.log.Debug("ipc: write failed, closing", "conn", c.peer.ID, "err", err)
			c.close()
			return
		}
		if f.last {
			// The peer reads the final frame, then EOF. The reader
			// gets a second to see the peer hang up.
			_ = c.nc.CloseWrite()
			_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
			close(c.flushed)
			return
		}
	}
}

func (c *conn) readLoop() {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
	m, ok := c.readMessage()
	if !ok {
		return
	}
	if m.Type != TypeHello {
		c.sendFatal(Errorf(CodeInvalidMessage, "the first frame must be a hello, got %q", m.Type))
		return
	}
	v, verr := negotiate(m.Hello)
	if verr != nil {
		c.s.log.Warn("ipc: protocol version mismatch", "conn", c.peer.ID, "client", m.Hello.Name, "min", m.Hello.Min, "max", m.Hello.Max)
		c.sendFatal(verr)
		return
	}
	c.peer.Version, c.peer.Name = v, m.Hello.Name
	_ = c.nc.SetReadDeadline(time.Time{})
	c.send(&Message{Type: TypeHello, Hello: &Hello{Version: v, Name: c.s.opts.Name, PID: c.s.pid}})
	for {
		m, ok := c.readMessage()
		if !ok {
			return
		}
		switch m.Type {
		case TypeRequest:
			if !c.request(m) {
				return
			}
		case TypeCancel:
			c.mu.Lock()
			if cancel := c.inflight[m.ID]; cancel != nil {
				cancel()
			}
			c.mu.Unlock()
		default:
			c.sendFatal(Errorf(CodeInvalidMessage, "a client may not send %q messages", m.Type))
			return
		}
	}
}

// readMessage reads and decodes one frame. On failure it queues the fatal
// error the peer should see (if any) and reports false.
func (c *conn) readMessage() (*Message, bool) {
	p, err := ReadFrame(c.br, c.s.opts.MaxFrame)
	if err != nil {
		var fse *FrameSizeError
		switch {
		case errors.As(err, &fse):
			c.sendFatal(Errorf(CodeFrameTooLarge, "frame of %d bytes exceeds the maximum of %d", fse.Size, fse.Max))
		case errors.Is(err, ErrEmptyFrame):
			c.sendFatal(Errorf(CodeInvalidMessage, "empty frame"))
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		default:
			c.s.log.Debug("ipc: read failed", "conn", c.peer.ID, "err", err)
		}
		return nil, false
	}
	m, err := DecodeMessage(p)
	if err != nil {
		c.sendFatal(Errorf(CodeInvalidMessage, "%v", err))
		return nil, false
	}
	return m, true
}

// request dispatches one request; false ends the read loop.
func (c *conn) request(m *Message) bool {
	select {
	case <-c.s.done:
		return c.send(&Message{Type: TypeResponse, ID: m.ID, Error: Errorf(CodeShuttingDown, "the kernel is shutting down")})
	default:
	}
	req := &Request{ID: m.ID, Method: m.Method, Params: m.Params, Peer: &c.peer}
	switch m.Method {
	case MethodPing:
		return c.reply(m.ID, Pong{Pong: true}, nil)
	case MethodSubscribe, MethodUnsubscribe:
		res, err := c.subscribe(req)
		return c.reply(m.ID, res, err)
	}
	h := c.s.opts.Mux.handlers[m.Method]
	if h == nil {
		return c.reply(m.ID, nil, Errorf(CodeUnknownMethod, "no method %q", m.Method))
	}
	select {
	case c.sem <- struct{}{}:
	default: // never block the reader: cancels must get through
		return c.reply(m.ID, nil, Errorf(CodeUnavailable, "%d requests already in flight on this connection", cap(c.sem)))
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	if _, dup := c.inflight[m.ID]; dup {
		c.mu.Unlock()
		cancel()
		<-c.sem
		c.sendFatal(Errorf(CodeInvalidMessage, "request id %d is already in flight", m.ID))
		return false
	}
	c.inflight[m.ID] = cancel
	c.mu.Unlock()
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		res, err := safeCall(ctx, h, req)
		if ctx.Err() != nil && err != nil {
			err = Errorf(CodeCanceled, "%s: canceled", m.Method)
		}
		// Reply before leaving the in-flight set, so a graceful
		// shutdown's final frame comes after every reply.
		c.reply(m.ID, res, err)
		c.mu.Lock()
		delete(c.inflight, m.ID)
		c.mu.Unlock()
		cancel()
		<-c.sem
	}()
	return true
}

// safeCall runs h, turning a panic into an internal error: one bad
// handler must not take the kernel down.
func safeCall(ctx context.Context, h Handler, r *Request) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Errorf(CodeInternal, "%s: handler panicked: %v", r.Method, p)
		}
	}()
	return h(ctx, r)
}

func (c *conn) reply(id uint64, res any, err error) bool {
	m := &Message{Type: TypeResponse, ID: id}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: CodeInternal, Message: err.Error()}
		}
		m.Error = e
	} else {
		raw, merr := json.Marshal(res)
		if merr != nil {
			m.Error = Errorf(CodeInternal, "encode result: %v", merr)
		} else {
			m.Result = raw
		}
	}
	return c.send(m)
}

func (c *conn) subscribe(r *Request) (any, error) {
	var p SubscribeParams
	if err := r.Bind(&p); err != nil {
		return nil, err
	}
	for _, t := range p.Topics {
		if !validPattern(t) {
			return nil, Errorf(CodeInvalidParams, "topic pattern %q: use a dotted name, name.* or *", t)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range p.Topics {
		i := indexOf(c.subs, t)
		switch {
		case r.Method == MethodSubscribe && i < 0:
			c.subs = append(c.subs, t)
		case r.Method == MethodUnsubscribe && i >= 0:
			c.subs = append(c.subs[:i], c.subs[i+1:]...)
		}
	}
	return SubscribeParams{Topics: append([]string{}, c.subs...)}, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func (c *conn) subscribed(topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.subs {
		if topicMatch(p, topic) {
			return true
		}
	}
	return false
}

// drain waits for in-flight handlers (or ctx), then sends the final
// shutting_down frame and waits for the connection to close.
func (c *conn) drain(ctx context.Context) {
	idle := make(chan struct{})
	go func() {
		for {
			c.mu.Lock()
			n := len(c.inflight)
			c.mu.Unlock()
			if n == 0 {
				close(idle)
				return
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-c.closed:
				close(idle)
				return
			}
		}
	}()
	select {
	case <-idle:
		c.sendFatal(Errorf(CodeShuttingDown, "the kernel is shutting down"))
		select {
		case <-c.closed:
		case <-ctx.Done():
			c.close()
		}
	case <-ctx.Done():
		c.close()
	}
}

// Streamer is a connection subscribed to events: a client following a
// session or the approvals, which a stop of the server would cut off.
type Streamer struct {
	Peer   uint64   // Peer.ID
	PID    int32    // from SO_PEERCRED
	Name   string   // from the client's hello
	Topics []string // its subscriptions
}

// Streamers lists the connections subscribed to at least one topic, but
// the one numbered except (the caller's own Peer.ID), by connection
// number.
func (s *Server) Streamers(except uint64) []Streamer {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c.peer.ID != except {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	var out []Streamer
	for _, c := range conns {
		c.mu.Lock()
		if len(c.subs) > 0 {
			out = append(out, Streamer{Peer: c.peer.ID, PID: c.peer.Cred.PID, Name: c.peer.Name, Topics: append([]string{}, c.subs...)})
		}
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}
