package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/bootstrap"
	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// KernelStatus is the result of the kernel's "status" method.
type KernelStatus struct {
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	Commit    string    `json:"commit"`
	GoVersion string    `json:"go_version"`
	Protocol  int       `json:"protocol"`
	StartedAt time.Time `json:"started_at"`
	UptimeMS  int64     `json:"uptime_ms"`
	Socket    string    `json:"socket"`
	Home      string    `json:"home"`
	// Clients is the number of connected clients, this one included;
	// Served counts every connection since the start.
	Clients int    `json:"clients"`
	Served  uint64 `json:"served"`
	// Refused counts connections refused because the peer was another
	// user (SO_PEERCRED).
	Refused int64 `json:"refused"`
	// IdleTimeout is how long the kernel waits without clients before
	// exiting; empty when it stays up.
	IdleTimeout string `json:"idle_timeout,omitempty"`
}

// kernelSocket is the socket of the kernel serving this configuration.
func (a *App) kernelSocket() (string, error) {
	l, err := a.Config()
	if err != nil {
		return "", err
	}
	rd, _ := a.Getenv("XDG_RUNTIME_DIR")
	return ipc.SocketPath(rd, l.Config.Home), nil
}

// kernelOptions are the bootstrap options for this invocation: the kernel
// is this binary, run as "fluffy kernel --oneshot" with the same
// configuration flags, environment and working directory.
func (a *App) kernelOptions() (bootstrap.Options, error) {
	l, err := a.Config()
	if err != nil {
		return bootstrap.Options{}, err
	}
	if _, err := a.DataDir(); err != nil {
		return bootstrap.Options{}, err
	}
	args := []string{"kernel", "--oneshot"}
	if a.home != "" {
		args = append(args, "--home", a.home)
	}
	if a.userConfig != "" {
		args = append(args, "--config", a.userConfig)
	}
	if a.logLevel != "" {
		args = append(args, "--log-level", a.logLevel)
	}
	if a.debug {
		args = append(args, "--debug")
	}
	for _, s := range a.sets {
		args = append(args, "--set", s)
	}
	rd, _ := a.Getenv("XDG_RUNTIME_DIR")
	o := bootstrap.ForConfig(&l.Config, rd, bootstrap.Exec{Path: a.Self, Args: args, Env: a.Environ, Dir: a.Cwd})
	o.Logger = a.Logger()
	o.CheckRuntime = func(ctx context.Context) error {
		if a.Core == nil {
			return errors.New("this build has no sandbox runtimes")
		}
		return a.Core.CheckRuntime(ctx, a.user())
	}
	return o, nil
}

// connectKernel reaches a healthy kernel, starting one if needed. A
// start-up failure is one message with its fix.
func (a *App) connectKernel(ctx context.Context) (*ipc.Client, error) {
	o, err := a.kernelOptions()
	if err != nil {
		return nil, err
	}
	c, err := bootstrap.Connect(ctx, o)
	var se *bootstrap.StartError
	if errors.As(err, &se) {
		return nil, &ExitError{Code: ExitFailure, Msg: se.Error()}
	}
	return c, err
}

// refusals counts refused peers for the status and, once the kernel has
// opened it, records each one in the audit log (ipc also logs them).
type refusals struct {
	n     atomic.Int64
	audit atomic.Pointer[audit.Shared]
}

func (r *refusals) RecordRefusal(ctx context.Context, f ipc.Refusal) error {
	r.n.Add(1)
	l := r.audit.Load()
	if l == nil {
		return nil
	}
	_, err := l.Append(ctx, audit.Entry{Kind: "ipc.refused", Actor: "kernel", Time: f.Time, Payload: map[string]any{
		"pid": f.Peer.PID, "uid": f.Peer.UID, "gid": f.Peer.GID, "want_uid": f.Want, "reason": f.Reason}})
	return err
}

func newKernelCmd(a *App) *cobra.Command {
	var oneshot bool
	cmd := &cobra.Command{
		Use:    "kernel",
		Short:  "Run the kernel in the foreground (started on demand by other commands)",
		Hidden: true,
		Long: `kernel serves fluffy's IPC protocol on the kernel socket until it is
stopped (SIGTERM, Ctrl-C). Other commands start it on demand with --oneshot:
it then exits after kernel.idle_timeout without any client.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKernel(cmd.Context(), a, oneshot)
		},
	}
	cmd.Flags().BoolVar(&oneshot, "oneshot", false, "exit after kernel.idle_timeout without clients")
	cmd.AddCommand(newKernelStatusCmd(a), newKernelStopCmd(a))
	return cmd
}

// dialRunning connects to a running kernel without starting one; it
// returns nil, nil when no kernel is running.
func (a *App) dialRunning(ctx context.Context) (*ipc.Client, error) {
	o, err := a.kernelOptions()
	if err != nil {
		return nil, err
	}
	c, err := bootstrap.Running(ctx, o)
	var se *bootstrap.StartError
	if errors.As(err, &se) {
		return nil, &ExitError{Code: ExitFailure, Msg: se.Error()}
	}
	return c, err
}

func newKernelStatusCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running kernel's status; never starts one (exit 1 when none runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dialRunning(cmd.Context())
			if err != nil {
				return err
			}
			if c == nil {
				return &ExitError{Code: ExitFailure, Msg: "no kernel is running ('fluffy status' starts one)"}
			}
			defer c.Close()
			return a.printStatus(cmd.Context(), c, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newKernelStopCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Stop the running kernel gracefully",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if c == nil {
				fmt.Fprintln(a.Stdout, "no kernel is running")
				return nil
			}
			defer c.Close()
			pid := c.ServerCred().PID
			// A kernel already stopping (idle) answers shutting_down: wait
			// for it all the same.
			if err := c.Call(ctx, "shutdown", nil, nil); err != nil && !errors.Is(err, ipc.ErrShuttingDown) {
				return fmt.Errorf("stop the kernel: %w", err)
			}
			select { // the kernel closes every connection once it is done
			case <-c.Done():
			case <-time.After(10 * time.Second):
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the kernel (pid %d) did not stop within 10s; kill it (kill %d)", pid, pid)}
			}
			fmt.Fprintf(a.Stdout, "kernel stopped (pid %d)\n", pid)
			return nil
		},
	}
}

func runKernel(ctx context.Context, a *App, oneshot bool) error {
	l, err := a.Config()
	if err != nil {
		return err
	}
	if _, err := a.DataDir(); err != nil {
		return err
	}
	sock, err := a.kernelSocket()
	if err != nil {
		return err
	}
	log := a.Logger().With("subsystem", "kernel")
	defer kernel.TuneGC(l.Config.Kernel, a.Getenv)()
	var idle time.Duration
	if oneshot {
		idle = time.Duration(l.Config.Kernel.IdleTimeout)
	}
	bi := buildinfo.Get()
	started := time.Now()
	mux := ipc.NewMux()
	var srv *ipc.Server
	refused := &refusals{}
	if err := mux.Handle("status", func(context.Context, *ipc.Request) (any, error) {
		st := KernelStatus{PID: os.Getpid(), Version: bi.Version, Commit: bi.Commit, GoVersion: bi.GoVersion,
			Protocol: ipc.Protocol, StartedAt: started.UTC(), UptimeMS: time.Since(started).Milliseconds(),
			Socket: sock, Home: l.Config.Home, Clients: srv.Conns(), Served: srv.Served(), Refused: refused.n.Load()}
		if idle > 0 {
			st.IdleTimeout = idle.String()
		}
		return st, nil
	}); err != nil {
		return err
	}
	if err := mux.Handle("shutdown", func(context.Context, *ipc.Request) (any, error) {
		log.Info("kernel stopping", "cause", "shutdown requested")
		go func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		return map[string]int{"pid": os.Getpid()}, nil
	}); err != nil {
		return err
	}
	// One broker for the approval.* methods ("fluffy approve", "fluffy
	// approvals --watch") and the sessions' inline approvals; it records
	// through the kernel's audit log once the sessions hold it.
	notify := &kernelNotifier{}
	broker, err := a.serveApprovals(mux, refused, notify)
	if err != nil {
		return err
	}
	srv, err = ipc.NewServer(ipc.ServerOptions{Mux: mux, Name: "fluffy-kernel/" + bi.Version, Logger: log, Refusals: refused,
		IdleTimeout: idle, IdleGrace: 2 * time.Duration(l.Config.Kernel.StartTimeout)})
	if err != nil {
		return err
	}
	ln, err := ipc.Listen(sock)
	if errors.Is(err, ipc.ErrInUse) {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("a kernel is already serving %s", sock)}
	}
	if err != nil {
		return err
	}
	stopKernel, err := a.startSessions(ctx, mux, log, refused, broker, notify, func(topic string, data any) {
		if _, err := srv.Publish(topic, data); err != nil {
			log.Warn("publish", "topic", topic, "err", err)
		}
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer stopKernel()
	log.Info("kernel serving", "socket", sock, "pid", os.Getpid(), "version", bi.Version, "idle_timeout", idle)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		log.Info("kernel stopping", "cause", context.Cause(ctx))
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		err = <-served
	}
	switch {
	case errors.Is(err, ipc.ErrIdle):
		log.Info("kernel idle, exiting", "idle_timeout", idle)
		return nil
	case errors.Is(err, ipc.ErrServerClosed):
		return nil
	}
	return err
}

func newStatusCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the kernel's status, starting the kernel if it is not running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.connectKernel(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			return a.printStatus(ctx, c, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func (a *App) printStatus(ctx context.Context, c *ipc.Client, asJSON bool) error {
	var st KernelStatus
	if err := c.Call(ctx, "status", nil, &st); err != nil {
		return fmt.Errorf("kernel status: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "kernel\trunning, pid %d\n", st.PID)
	fmt.Fprintf(tw, "version\t%s (commit %s, %s, protocol %d)\n", st.Version, st.Commit, st.GoVersion, st.Protocol)
	fmt.Fprintf(tw, "uptime\t%v\n", (time.Duration(st.UptimeMS) * time.Millisecond).String())
	fmt.Fprintf(tw, "socket\t%s\n", st.Socket)
	fmt.Fprintf(tw, "clients\t%d connected, %d served, %d refused (another user)\n", st.Clients, st.Served, st.Refused)
	if st.IdleTimeout != "" {
		fmt.Fprintf(tw, "idle exit\tafter %s without clients\n", st.IdleTimeout)
	} else {
		fmt.Fprintf(tw, "idle exit\tnever (started by hand)\n")
	}
	return tw.Flush()
}
