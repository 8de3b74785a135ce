// Command fluffy is the fluffy binary: the CLI, the supervisor and, through
// hidden re-executions of itself, the sandbox init. It hands over to
// internal/cli at once.
//
// It is built twice (see the Makefile). The full build, installed as
// fluffy-core, has every command. The front build (-tags fluffy_front),
// installed as fluffy, is small: it runs 'fluffy sandbox run' on the
// native runtime and 'fluffy version' itself, and replaces itself with
// fluffy-core (exec, same process, same arguments) for everything else,
// so that a sandboxed command does not pay for starting the model SDKs,
// the container client, the policy engine and the kernel.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/cli"
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
	if code, ok := forwarder(os.Args); ok {
		return code
	}
	if front && !cli.FrontRuns(os.Args[1:]) {
		return handOver()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := cli.DefaultApp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluffy:", err)
		return 1
	}
	if front {
		app.HandOver = func() int {
			stop() // the signals fluffy-core will handle itself
			return handOver()
		}
	}
	return cli.Main(ctx, app, os.Args[1:])
}
