package email

import (
	"net"
	"sync"
)

// tracked is a listener that remembers the connections it accepted, so
// Run can close every one as it returns. go-smtp's Close alone misses a
// listener Serve has not registered yet (Serve then blocks in Accept for
// good) and a connection accepted but not yet registered (it then lives
// until its client leaves or times out).
type tracked struct {
	net.Listener

	// mu guards the fields below.
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func track(ln net.Listener) *tracked {
	return &tracked{Listener: ln, conns: map[*trackedConn]struct{}{}}
}

func (l *tracked) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes the listener and every connection it accepted that is
// still open; Accept refuses from then on.
func (l *tracked) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	l.Listener.Close()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *tracked
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
