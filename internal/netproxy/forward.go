package netproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// MaxForwarded bounds the connections one forwarder splices at once.
const MaxForwarded = 1024

// ForwardCommand is the hidden first argument under which the fluffy
// binary runs the in-sandbox forwarder (ForwardMain) instead of the CLI.
const ForwardCommand = "__netproxy-forward"

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

// ForwardMain is the forwarder's entry point in the fluffy binary:
//
//	fluffy __netproxy-forward -listen 127.0.0.1:3128 -socket /run/fluffy/egress.sock
//
// It writes "ready" to stdout once listening, and runs until SIGTERM or
// SIGINT. It returns the process exit status.
func ForwardMain(args []string) int {
	fs := flag.NewFlagSet(ForwardCommand, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3128", "loopback address to listen on")
	socket := fs.String("socket", "", "the proxy's unix socket")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "netproxy forward: -socket is required")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netproxy forward:", err)
		return 1
	}
	fmt.Println("ready")
	var d net.Dialer
	err = Forward(ctx, ln, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "unix", *socket)
	})
	if err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
