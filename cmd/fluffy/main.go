//go:build !fluffy_front

package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/cli"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/wiring"
)

func main() {
	os.Exit(run())
}

func run() int {
	// The sandbox init is this binary re-executed (when the small init
	// binary is absent); it must not pay for anything else (signal
	// handling, configuration, cobra).
	if native.IsInit() {
		return native.InitMain()
	}
	// So is the egress forwarder of --net proxy.
	if len(os.Args) > 1 && os.Args[1] == netproxy.ForwardCommand {
		return netproxy.ForwardMain(os.Args[2:])
	}
	ctx, stop := cli.SignalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := cli.DefaultApp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluffy:", err)
		return 1
	}
	app.Core = wiring.New()
	return cli.Main(ctx, app, os.Args[1:])
}
