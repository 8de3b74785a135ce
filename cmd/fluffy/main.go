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
	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
)

func main() {
	os.Exit(run())
}

func run() int {
	// Hidden re-executions come first, before any CLI set-up.
	if len(os.Args) > 1 && os.Args[1] == doctor.ProbeCommand {
		return doctor.ProbeMain(os.Args[2:])
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
