package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// conn is one end of a SOCK_SEQPACKET connection, non-blocking, driven
// through os.File's poller: reads and writes wait without holding a
// thread, honour deadlines and return os.ErrClosed once Close was called
// (the descriptor is never used after it is closed, nor reused under a
// pending call).
type conn struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool // Close was called: errors from then on are os.ErrClosed
}

// newConn takes ownership of fd, which must be non-blocking.
func newConn(fd int, name string) (*conn, error) {
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &conn{f: f, rc: rc}, nil
}

func (c *conn) Close() error {
	c.closed.Store(true)
	return c.f.Close()
}

// closedErr turns the poller's "use of closed file" (internal/poll's
// ErrFileClosing, which os does not translate for RawConn) into
// os.ErrClosed once Close was called.
func (c *conn) closedErr(err error) error {
	if err != nil && c.closed.Load() {
		return os.ErrClosed
	}
	return err
}

// recv reads one frame into buf and any control message into oob. A
// frame longer than buf or a control message longer than oob is an
// error (the descriptors of a truncated control message are lost to the
// kernel, those that arrived are still the caller's to close). n == 0
// with a nil error is the peer's end of the connection.
func (c *conn) recv(buf, oob []byte) (n, oobn int, err error) {
	var flags int
	var rerr error
	err = c.rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, 0, c.closedErr(err)
	}
	if flags&unix.MSG_TRUNC != 0 {
		return n, oobn, fmt.Errorf("sandboxd: frame longer than %d bytes", len(buf))
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return n, oobn, errors.New("sandboxd: control message truncated")
	}
	return n, oobn, nil
}

// send writes one frame, with oob as its control message.
func (c *conn) send(b, oob []byte) error {
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		werr = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
		return werr != unix.EAGAIN
	})
	if err == nil {
		err = werr
	}
	return c.closedErr(err)
}

func (c *conn) sendFrame(f frame) error {
	b, err := encodeFrame(f)
	if err != nil {
		return err
	}
	return c.send(b, nil)
}

func (c *conn) setReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// peerUID is the uid of the process at the other end, as it was when it
// connected (or listened).
func (c *conn) peerUID() (int, int, error) {
	var cred *unix.Ucred
	var gerr error
	err := c.rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = gerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sandboxd: SO_PEERCRED: %w", err)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// parseRights returns the descriptors in a control message; anything
// else in it is ignored. The caller owns (and must close) what it returns.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// maxSend is the longest frame this end can send: the kernel refuses a
// SOCK_SEQPACKET message longer than the socket's send buffer less 32
// bytes (EMSGSIZE). The default buffer (net.core.wmem_default, ~208 KiB)
// takes MaxFrame; a system configured lower gets shorter frames.
func (c *conn) maxSend() int {
	n := MaxFrame
	_ = c.rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil && v-64 < n {
			n = max(v-64, 64)
		}
	})
	return n
}
