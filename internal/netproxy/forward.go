package netproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/netproxy/forward"
)

// ForwardCommand is the hidden first argument under which the fluffy
// binary runs the in-sandbox forwarder (ForwardMain) instead of the CLI.
const ForwardCommand = "__netproxy-forward"

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
	err = forward.Forward(ctx, ln, forward.DialUnix(*socket))
	if err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
