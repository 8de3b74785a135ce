// Package forward is the egress proxy's in-sandbox half: it brings a new
// network namespace's loopback up and splices TCP connections on a
// loopback address to the proxy's unix socket. It imports only net and
// x/sys so the small sandbox init (cmd/fluffy-sandbox-init) can run it
// in-process; internal/netproxy's hidden forwarder mode uses it too.
package forward

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// MaxForwarded bounds the connections one forwarder splices at once.
const MaxForwarded = 1024

// Forward accepts connections on ln and splices each, both ways, to a
// connection from dial (the proxy's unix socket), until ctx ends; then it
// closes ln and every open connection and returns once they are done.
// Each direction ends with a half-close so request/response protocols
// finish cleanly.
//
// At most MaxForwarded connections are spliced at once; more wait in the
// listener's backlog (the proxy bounds its side too).
func Forward(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error)) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	sem := make(chan struct{}, MaxForwarded)
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := ln.Accept()
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("netproxy: forward: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			up, err := dial(ctx)
			if err != nil {
				c.Close()
				return
			}
			mu.Lock()
			if ctx.Err() != nil {
				mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			open[c], open[up] = struct{}{}, struct{}{}
			mu.Unlock()
			splice(c, up)
			mu.Lock()
			delete(open, c)
			delete(open, up)
			mu.Unlock()
		}()
	}
}

// splice copies a to b and b to a, half-closing each side as its source
// ends, and closes both when both directions are done.
func splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		copyHalf(b, a)
		close(done)
	}()
	copyHalf(a, b)
	<-done
	a.Close()
	b.Close()
}

func copyHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
		return
	}
	// An error one way ends both.
	dst.Close()
	src.Close()
}

// LoopbackUp brings the loopback interface of the calling thread's network
// namespace up (a new namespace starts with it down). It needs
// CAP_NET_ADMIN in that namespace.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netproxy: loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("netproxy: loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("netproxy: loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("netproxy: loopback up: %w", err)
	}
	return nil
}

// Start listens on listen inside the current network namespace and
// forwards every connection to the proxy's unix socket at socket, in the
// background, until ctx ends or stop is called. It returns once
// listening, so a command started afterwards finds the port open.
func Start(ctx context.Context, listen, socket string) (stop func(), err error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("netproxy: forwarder: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Forward(ctx, ln, DialUnix(socket))
	}()
	return func() { cancel(); <-done }, nil
}

// DialUnix returns a dial function for Forward that connects to the unix
// socket at path.
func DialUnix(path string) func(context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
}
