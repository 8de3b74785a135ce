package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// newSandboxServeCmd is the per-user sandbox server that the small fluffy
// binary starts on its first 'fluffy sandbox run' and then forwards every
// 'fluffy sandbox run' to (docs/sandbox-server.md). It runs each one
// exactly as a fluffy process of its own would, with the caller's
// arguments, environment, working directory and standard streams, but on
// a runtime that has the next sandbox started ahead and with the audit
// log already open.
func newSandboxServeCmd(a *App) *cobra.Command {
	var socket, idle string
	var readyFD int
	cmd := &cobra.Command{
		Use:    "serve --socket PATH",
		Short:  "Run the per-user sandbox server (fluffy starts it itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return fmt.Errorf("%w: --socket is required", errUsage)
			}
			var idleFor time.Duration
			if idle != "" {
				d, err := units.ParseDuration(idle)
				if err != nil {
					return fmt.Errorf("%w: --idle: %w", errUsage, err)
				}
				idleFor = time.Duration(d)
			}
			var ready *os.File
			if readyFD > 0 {
				f, err := sandboxd.ReadyFile(readyFD)
				if err != nil {
					return fmt.Errorf("%w: %w", errUsage, err)
				}
				ready = f
			}
			log := a.Logger()
			host := NewSandboxHost(SandboxHostOptions{Self: a.Self, Logger: log, Spares: 1})
			defer func() {
				if err := host.Close(); err != nil {
					log.Error("sandbox server: close", "err", err)
				}
			}()
			err := sandboxd.Serve(cmd.Context(), sandboxd.ServerOptions{Socket: a.abs(socket), Idle: idleFor, Logger: log, Ready: ready},
				func(ctx context.Context, c *sandboxd.Incoming) sandboxd.Reply {
					return serveCall(ctx, a.Self, host, c)
				})
			if errors.Is(err, sandboxd.ErrRunning) {
				return nil // another server took the socket first: it serves
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&socket, "socket", "", "the socket to listen on")
	fl.StringVar(&idle, "idle", "", "exit after this long without a command (default 10m)")
	fl.IntVar(&readyFD, strings.TrimPrefix(sandboxd.ReadyFlag, "--"), 0, "a descriptor to write one byte to once listening")
	return cmd
}

// serveCall runs one forwarded command line as its own fluffy process
// would, on the host's shared runtime and audit logs.
func serveCall(ctx context.Context, self string, host *SandboxHost, c *sandboxd.Incoming) sandboxd.Reply {
	if !sandboxd.Forwardable(c.Args) {
		// Only 'sandbox run' is served; the client runs anything else itself.
		return sandboxd.Reply{HandOver: true}
	}
	app := &App{Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr, Environ: c.Environ, Cwd: c.Cwd, Self: self, Host: host}
	if l, err := app.Config(); err == nil && l.Config.Sandbox.Server == "off" {
		// The caller's configuration turns the server off (only the files
		// and the environment count: Main applies the global flags).
		return sandboxd.Reply{HandOver: true}
	}
	app.loaded, app.logger = nil, nil // loaded again with the global flags
	return sandboxd.Reply{Code: Main(ctx, app, c.Args)}
}
