package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/bootstrap"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

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
			if err := c.Call(ctx, kernel.MethodShutdown, nil, nil); err != nil && !errors.Is(err, ipc.ErrShuttingDown) {
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

// runKernel runs the kernel daemon (App.Core) and turns its typed
// failures into their messages.
func runKernel(ctx context.Context, a *App, oneshot bool) error {
	if a.Core == nil {
		return errors.New("this build cannot run the kernel")
	}
	u := a.user()
	lf, err := a.kernelLog()
	if err != nil {
		return err
	}
	if lf != nil {
		defer lf.Close()
		u.Stderr = lf
	}
	return kernelError(a, a.Core.RunKernel(ctx, u, kernel.DaemonOptions{Oneshot: oneshot}))
}

// kernelError turns the kernel daemon's typed failures into their
// messages.
func kernelError(a *App, err error) error {
	switch {
	case errors.Is(err, ipc.ErrInUse):
		sock, serr := a.kernelSocket()
		if serr != nil {
			return err
		}
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("a kernel is already serving %s", sock)}
	case errors.Is(err, kernel.ErrAuditDamaged):
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the kernel refuses to start: %v\nfix: inspect it with 'fluffy audit verify --full'; the kernel will not run sessions over a damaged audit log%s", err, auditRestoreHint(a))}
	case errors.Is(err, kernel.ErrAuditUnavailable):
		return &ExitError{Code: ExitFailure, Msg: err.Error()}
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
	var st kernel.DaemonStatus
	if err := c.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
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
	for _, b := range st.Busy {
		fmt.Fprintf(tw, "busy\t%s\n", termsafe.String(b))
	}
	if sv := st.Serve; sv != nil {
		printServeStatus(tw, sv)
	}
	if st.Sched != nil {
		printSchedSummary(tw, st.Sched)
	}
	return tw.Flush()
}
