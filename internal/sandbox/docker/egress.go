package docker

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/netproxy/forward"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// egressForwarder serves network mode proxy for one container: a TCP
// listener on sandbox.ProxyListen in the container's own network
// namespace (the engine's "none": loopback only), opened by this process,
// whose connections it splices to the egress proxy's unix socket on the
// host. The container keeps no other network and runs nothing of
// fluffy's; the proxy sees this process as the peer (its own user) and
// audits every request as for a native sandbox.
type egressForwarder struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startEgress opens the listener in the network namespace of pid (the
// container's init, started at start: /proc/pid/stat's start time) and
// starts forwarding it to socket. The namespace is opened before the start
// time is checked, so a pid reused by another process since (the
// container died) is refused rather than entered.
func startEgress(pid int, start, socket string) (*egressForwarder, error) {
	if socket == "" {
		return nil, fmt.Errorf("%w: network mode proxy needs the egress proxy's socket", sandbox.ErrInvalidSpec)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("%w: egress forwarder: the container's network namespace: %w", sandbox.ErrSetup, err)
	}
	defer ns.Close()
	if st, err := procStart(pid); err != nil || st != start {
		return nil, fmt.Errorf("%w: egress forwarder: the container's init (pid %d) is gone", sandbox.ErrSetup, pid)
	}
	ln, err := listenInNetns(ns, sandbox.ProxyListen)
	if err != nil {
		return nil, fmt.Errorf("%w: egress forwarder: %w", sandbox.ErrSetup, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &egressForwarder{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		_ = forward.Forward(ctx, ln, forward.DialUnix(socket))
	}()
	return f, nil
}

// stop closes the listener and every spliced connection.
func (f *egressForwarder) stop() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
}

// listenInNetns listens on addr (TCP) inside the network namespace
// target. The socket is created on a thread moved into that namespace
// for the call; it stays in the namespace it was created in.
func listenInNetns(target *os.File, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// A thread that cannot return to its namespace is not unlocked:
		// it ends with this goroutine instead of serving others.
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering the container's network namespace: %w", err)}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			ch <- result{err: fmt.Errorf("leaving the container's network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ln: ln, err: lerr}
	}()
	r := <-ch
	return r.ln, r.err
}

// withoutEgressSocket drops FLUFFY_EGRESS_SOCKET from env: a container
// reaches the proxy through the loopback forwarder only.
func withoutEgressSocket(env []string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if !strings.HasPrefix(e, "FLUFFY_EGRESS_SOCKET=") {
			out = append(out, e)
		}
	}
	return out
}
