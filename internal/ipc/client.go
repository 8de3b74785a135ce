package ipc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ErrClosed: the connection is closed (by Close, by the server, or because
// the server went away). Client.Err says why when the server said so.
var ErrClosed = errors.New("ipc: connection closed")

// DialError is every error Dial returns: the socket, the server's
// credentials when the connection got that far (zero otherwise), and the
// cause, which may be an *Error from the server (version_mismatch) or a
// network error (ENOENT, ECONNREFUSED, a deadline).
type DialError struct {
	Path string
	Cred Cred
	Err  error
}

func (e *DialError) Error() string {
	if e.Cred.PID != 0 {
		return fmt.Sprintf("ipc: dial %s (server pid %d): %v", e.Path, e.Cred.PID, e.Err)
	}
	return fmt.Sprintf("ipc: dial %s: %v", e.Path, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Event is a server-pushed message.
type Event struct {
	Topic string
	Data  json.RawMessage
}

// ClientOptions configure Dial. Zero values take the defaults.
type ClientOptions struct {
	Name string // sent in the hello, e.g. "fluffy/1.0"
	// MaxFrame is the largest frame accepted from the server
	// (DefaultMaxFrame).
	MaxFrame int
	// EventBuffer is the capacity of Events() (256). When the application
	// does not drain it, the client stops reading; the server then
	// disconnects it as a slow consumer rather than lose events silently.
	EventBuffer int
	// HandshakeTimeout bounds connect + hello when ctx has no deadline
	// (5s).
	HandshakeTimeout time.Duration
	// MinVersion and MaxVersion are the protocol versions offered
	// (MinProtocol, Protocol); tests use them to provoke a mismatch.
	MinVersion, MaxVersion int
}

// Client is one connection to a server. Its methods are safe for
// concurrent use.
type Client struct {
	nc       *net.UnixConn
	br       *bufio.Reader
	maxFrame int
	hello    Hello
	cred     Cred
	events   chan Event
	done     chan struct{}

	wmu sync.Mutex // serialises frame writes

	mu      sync.Mutex // guards the fields below
	pending map[uint64]chan *Message
	nextID  uint64
	err     error
}

// Dial connects to the server at path, checks with SO_PEERCRED that the
// server runs as this user (a socket served by anyone else is refused
// with ErrPermissionDenied), and exchanges hellos. A server that speaks
// no common version gives an error matching ErrVersionMismatch.
func Dial(ctx context.Context, path string, opts ClientOptions) (*Client, error) {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 5 * time.Second
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.HandshakeTimeout)
		defer cancel()
	}
	if opts.MinVersion == 0 {
		opts.MinVersion = MinProtocol
	}
	if opts.MaxVersion == 0 {
		opts.MaxVersion = Protocol
	}
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 256
	}
	nc, err := dialUnix(ctx, path)
	if err != nil {
		return nil, &DialError{Path: path, Err: err}
	}
	c := &Client{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), maxFrame: clampMax(opts.MaxFrame), events: make(chan Event, opts.EventBuffer),
		done: make(chan struct{}), pending: map[uint64]chan *Message{}}
	if err := c.handshake(ctx, path, opts); err != nil {
		nc.Close()
		return nil, &DialError{Path: path, Cred: c.cred, Err: err}
	}
	go c.readLoop()
	return c, nil
}

func (c *Client) handshake(ctx context.Context, path string, opts ClientOptions) error {
	cred, err := PeerCred(c.nc)
	if err != nil {
		return err
	}
	c.cred = cred
	if int(cred.UID) != os.Geteuid() {
		return Errorf(CodePermissionDenied, "the socket %s is served by uid %d (pid %d), not by you (uid %d)", path, cred.UID, cred.PID, os.Geteuid())
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err = c.write(context.Background(), &Message{Type: TypeHello, Hello: &Hello{Min: opts.MinVersion, Max: opts.MaxVersion, Name: opts.Name, PID: os.Getpid()}})
	if err == nil {
		var m *Message
		if m, err = c.read(); err == nil {
			switch {
			case m.Type == TypeError:
				return m.Error
			case m.Type != TypeHello || m.Hello.Version < opts.MinVersion || m.Hello.Version > opts.MaxVersion:
				return Errorf(CodeInvalidMessage, "the server answered the hello with a %q message (version %v)", m.Type, m.Hello)
			}
			c.hello = *m.Hello
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ipc: hello: %w", ctx.Err())
		}
		return fmt.Errorf("ipc: hello: %w", err)
	}
	if !stop() {
		return fmt.Errorf("ipc: hello: %w", ctx.Err())
	}
	return c.nc.SetDeadline(time.Time{})
}

// Server returns the server's hello: negotiated version, name, pid.
func (c *Client) Server() Hello { return c.hello }

// ServerCred returns the server process's credentials (SO_PEERCRED).
func (c *Client) ServerCred() Cred { return c.cred }

// Events delivers server-pushed events in order; it is closed when the
// connection ends.
func (c *Client) Events() <-chan Event { return c.events }

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while it is open): the
// server's final *Error when it sent one (shutting_down, slow_consumer,
// ...), otherwise an error wrapping ErrClosed.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection. Pending calls fail with ErrClosed.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
	c.mu.Unlock()
	c.nc.Close()
}

// write sends one frame. When ctx ends mid-write the frame may be cut
// short: the connection then fails, since the stream cannot be
// resynchronised.
func (c *Client) write(ctx context.Context, m *Message) error {
	b, err := encode(m)
	if err != nil {
		return err
	}
	if len(b) > c.maxFrame {
		return &FrameSizeError{Size: uint32(min(len(b), 1<<32-1)), Max: uint32(c.maxFrame)}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetWriteDeadline(time.Unix(1, 0)) })
	n, err := c.nc.Write(AppendFrame(make([]byte, 0, HeaderSize+len(b)), b))
	if !stop() {
		if err == nil {
			_ = c.nc.SetWriteDeadline(time.Time{})
			return nil
		}
		if n == 0 {
			_ = c.nc.SetWriteDeadline(time.Time{})
			return ctx.Err()
		}
		c.fail(fmt.Errorf("%w: write interrupted: %w", ErrClosed, ctx.Err()))
		return ctx.Err()
	}
	if err != nil {
		c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
	}
	return err
}

func (c *Client) read() (*Message, error) {
	p, err := ReadFrame(c.br, c.maxFrame)
	if err != nil {
		return nil, err
	}
	return DecodeMessage(p)
}

func (c *Client) readLoop() {
	defer close(c.events)
	for {
		m, err := c.read()
		if err != nil {
			c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		switch m.Type {
		case TypeResponse:
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m // buffered; a canceled call has gone away
			}
		case TypeEvent:
			select {
			case c.events <- Event{Topic: m.Topic, Data: m.Data}:
			case <-c.done:
				return
			}
		case TypeError:
			c.fail(m.Error)
			return
		default:
			c.fail(fmt.Errorf("%w: the server sent a %q message", ErrClosed, m.Type))
			return
		}
	}
}

// Call sends a request and waits for its response, decoding the result
// into result (which may be nil). Errors from the server are *Error. When
// ctx ends first, Call sends a cancel for the request and returns ctx's
// error; a late response is dropped.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("ipc: %s params: %w", method, err)
		}
		raw = b
	}
	ch := make(chan *Message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := c.write(ctx, &Message{Type: TypeRequest, ID: id, Method: method, Params: raw}); err != nil {
		forget()
		if e := c.Err(); e != nil {
			return e
		}
		return fmt.Errorf("ipc: %s: %w", method, err) // nothing was sent
	}
	var m *Message
	select {
	case m = <-ch:
	case <-ctx.Done():
		forget()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = c.write(cctx, &Message{Type: TypeCancel, ID: id})
		cancel()
		return fmt.Errorf("ipc: %s: %w", method, ctx.Err())
	case <-c.done:
		// A server shutting down gracefully answers every request before
		// its final frame, and the reader hands the answer over before it
		// ends the connection: an answer already here wins over the end.
		select {
		case m = <-ch:
		default:
			forget()
			return c.Err()
		}
	}
	if m.Error != nil {
		return m.Error
	}
	if result != nil {
		if err := json.Unmarshal(m.Result, result); err != nil {
			return fmt.Errorf("ipc: %s result: %w", method, err)
		}
	}
	return nil
}

// Ping calls the built-in ping method.
func (c *Client) Ping(ctx context.Context) error {
	var p Pong
	if err := c.Call(ctx, MethodPing, nil, &p); err != nil {
		return err
	}
	if !p.Pong {
		return Errorf(CodeInvalidMessage, "ping answered without pong")
	}
	return nil
}

// Subscribe adds topic patterns ("session.output", "session.*", "*") to
// this connection's subscriptions.
func (c *Client) Subscribe(ctx context.Context, topics ...string) error {
	return c.Call(ctx, MethodSubscribe, SubscribeParams{Topics: topics}, nil)
}

// Unsubscribe removes topic patterns.
func (c *Client) Unsubscribe(ctx context.Context, topics ...string) error {
	return c.Call(ctx, MethodUnsubscribe, SubscribeParams{Topics: topics}, nil)
}
