// Command fluffy is the fluffy binary: the CLI, the supervisor and, through
// hidden re-executions of itself, the sandbox init. It hands over to
// internal/cli at once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/cli"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

func main() {
	os.Exit(run())
}

func run() int {
	// The sandbox init is this binary re-executed; it must not pay for
	// anything else (signal handling, configuration, cobra).
	if native.IsInit() {
		return native.InitMain()
	}
	if len(os.Args) > 1 && os.Args[1] == netproxy.ForwardCommand {
		return netproxy.ForwardMain(os.Args[2:])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := cli.DefaultApp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluffy:", err)
		return 1
	}
	return cli.Main(ctx, app, os.Args[1:])
}
