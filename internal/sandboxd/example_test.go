package sandboxd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

// A small client: forward `sandbox run` to the server of fluffy-core,
// starting one if need be, and fall back to running the command itself
// only when the request was not delivered.
func ExampleCall() {
	core := "/usr/local/bin/fluffy-core"
	args := os.Args[1:]
	if !sandboxd.Forwardable(args) {
		return // run it in-process (exec fluffy-core)
	}
	sock, err := sandboxd.SocketPath(core)
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // names the directory and the fix
		return                       // run it in-process
	}
	wd, _ := os.Getwd()
	r, err := sandboxd.Call(context.Background(), sandboxd.ClientOptions{
		Socket:            sock,
		Server:            []string{core, "sandbox", "serve", "--socket", sock}, // + --ready-fd 3
		CatchSignalsAfter: 50 * time.Millisecond,
	}, sandboxd.Request{Args: args, Environ: os.Environ(), Cwd: wd})
	switch {
	case errors.Is(err, sandboxd.ErrUnavailable):
		// Nothing ran: run it in-process.
	case err != nil:
		fmt.Fprintln(os.Stderr, err) // it may have run: never run it again
		os.Exit(1)
	case r.HandOver:
		// The server asks this process to run it.
	default:
		os.Exit(r.Code)
	}
}

// The server side: `fluffy-core sandbox serve --socket S --ready-fd 3`.
func ExampleServe() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ready, err := sandboxd.ReadyFile(sandboxd.ReadyFD)
	if err != nil {
		ready = nil // started by hand
	}
	err = sandboxd.Serve(ctx, sandboxd.ServerOptions{Socket: "/run/user/1000/fluffy/sandbox-x.sock", Ready: ready},
		func(ctx context.Context, c *sandboxd.Incoming) sandboxd.Reply {
			// Run c.Args as `fluffy` would, with c.Environ, c.Cwd, c.Stdin,
			// c.Stdout and c.Stderr; ctx ends on the client's Ctrl-C
			// (context.Cause: *sandboxd.SignalError) or disconnection.
			fmt.Fprintln(c.Stdout, "ran", c.Args)
			return sandboxd.Reply{Code: 0}
		})
	if errors.Is(err, sandboxd.ErrRunning) {
		return // another server took the socket first: it serves
	}
}
