package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
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
			if _, set := os.LookupEnv("GOGC"); !set {
				// A call allocates a few hundred KB (SQLite, the command
				// tree) over a live heap of ~2 MB: at Go's default the
				// server collected every ~8 calls, a few % of its CPU.
				// Every ~50 calls costs a heap of ~16 MB instead.
				debug.SetGCPercent(400)
			}
			log := a.Logger()
			host := a.Core.NewSandboxHost(a.user())
			defer func() {
				if err := host.Close(); err != nil {
					log.Error("sandbox server: close", "err", err)
				}
			}()
			// A server started by a nohup'd command would hand its
			// ignored SIGHUP down to every later sandbox (an ignored
			// signal stays ignored across exec). Caught, it is reset to
			// the default in each child; the server, in a session of its
			// own, has no terminal to hang up on, so it only logs it.
			// SIGUSR1 is another fluffy process waiting for the audit
			// log's writer lock (sandboxd.AskToReleaseAudit). Both stay caught
			// until the process ends: an uncaught SIGUSR1 would kill a
			// server before it has closed its logs.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1)
			sigsDone := make(chan struct{})
			defer close(sigsDone)
			go func() {
				for {
					select {
					case sig := <-sigs:
						if sig == syscall.SIGUSR1 {
							log.Debug("sandbox server: closing the audit logs no run uses, for another process")
							host.ReleaseAudits()
							continue
						}
						log.Info("sandbox server: SIGHUP ignored (stop it with 'fluffy sandbox server stop')")
					case <-sigsDone:
						return
					}
				}
			}()
			err := sandboxd.Serve(cmd.Context(), sandboxd.ServerOptions{Socket: a.abs(socket), Idle: idleFor, Logger: log, Ready: ready},
				func(ctx context.Context, c *sandboxd.Incoming) sandboxd.Reply {
					return serveCall(ctx, a.Core, a.Self, host, c)
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
func serveCall(ctx context.Context, core Core, self string, host *sandboxrun.Host, c *sandboxd.Incoming) sandboxd.Reply {
	if !sandboxd.Forwardable(c.Args) {
		// Only 'sandbox run' is served; the client runs anything else itself.
		return sandboxd.Reply{HandOver: true}
	}
	app := &App{Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr, Environ: c.Environ, Cwd: c.Cwd, Self: self, Core: core, Host: host,
		early: func(code int) { c.Reply(sandboxd.Reply{Code: code}) }}
	code := Main(ctx, app, c.Args)
	if app.handOver {
		return sandboxd.Reply{HandOver: true}
	}
	return sandboxd.Reply{Code: code}
}

// newSandboxServerCmd shows and stops the sandbox server of this fluffy
// installation (the one the fluffy binary beside this fluffy-core uses).
func newSandboxServerCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Show or stop your sandbox server",
		Long: `'fluffy sandbox run' is forwarded to a per-user sandbox server, which the
small fluffy binary starts on first use and which exits after 10 idle
minutes (docs/sandbox-server.md). FLUFFY_SANDBOX_SERVER=off, or the user
configuration key sandbox.server: off, runs every command in a process of
its own instead.`,
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Say whether your sandbox server runs, with its pid, socket and log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := serverStatus(a)
			if err != nil {
				return err
			}
			if !st.Running() {
				fmt.Fprintf(a.Stdout, "not running (socket %s)\n", st.Socket)
				return nil
			}
			fmt.Fprintf(a.Stdout, "running: pid %d\nsocket %s\nlog %s\n", st.PID, st.Socket, st.Log)
			return nil
		},
	}
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Stop your sandbox server (commands under way finish first); the next 'fluffy sandbox run' starts a new one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sock, err := sandboxd.SocketPath(a.Self)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, err := sandboxd.Stop(ctx, sock)
			if err != nil {
				return err
			}
			if st.Running() {
				fmt.Fprintf(a.Stdout, "stopped (pid %d)\n", st.PID)
			} else {
				fmt.Fprintln(a.Stdout, "not running")
			}
			return nil
		},
	}
	cmd.AddCommand(status, stop)
	return cmd
}

// serverStatus finds the sandbox server this installation's fluffy uses:
// the one of fluffy-core, which is this binary when it was handed over.
func serverStatus(a *App) (sandboxd.ServerStatus, error) {
	sock, err := sandboxd.SocketPath(a.Self)
	if err != nil {
		return sandboxd.ServerStatus{}, err
	}
	return sandboxd.Status(sock)
}
