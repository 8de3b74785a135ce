package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// ServeLog is the assistant daemon's log in the data directory's logs/,
// beside stderr.
const ServeLog = "serve.log"

func newServeCmd(a *App) *cobra.Command {
	var check, wait bool
	var format string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the assistant daemon in the foreground: the kernel with its channels (docs/serve.md)",
		Long: `serve runs the kernel as a long-lived daemon in the foreground: it serves the
kernel socket as 'fluffy kernel' does (so 'fluffy status', 'fluffy approve' and
'fluffy sessions' reach it), starts every channel the serve: section configures
under supervision, and serves /healthz and /readyz on serve.health. It logs to
stderr and to logs/serve.log in the data directory. SIGTERM or Ctrl-C stops the
channels, lets the turns in progress end within serve.grace, and exits 0; the
sessions stay resumable.

A kernel that a command started on demand, holding the socket, hands it
over when it is idle: it stops as 'fluffy kernel stop' stops it and serve
starts. When it is busy (a turn running, an approval waiting, a client
following a session) serve says what it is doing and exits, or with
--wait waits until it is idle. Another 'fluffy serve' is never replaced.

'fluffy serve init' scaffolds the assistant's workspace; 'fluffy serve --check'
validates the configuration and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch format {
			case "", "text", "json":
			default:
				return fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
			}
			if format != "" {
				a.sets = append(a.sets, "log.format="+format)
			}
			if a.Core == nil {
				return errors.New("this build cannot run the daemon")
			}
			if check {
				return a.checkServe()
			}
			return a.runServe(cmd.Context(), wait)
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "validate the whole configuration (channels, routes, approvers) and exit: 0 valid, 1 not")
	cmd.Flags().BoolVar(&wait, "wait", false, "when an on-demand kernel holding the socket is busy, wait until it is idle and take over (default: refuse)")
	cmd.Flags().StringVar(&format, "log-format", "", "log format: text or json (default log.format)")
	cmd.AddCommand(newServeInitCmd(a), newServeInstallUnitCmd(a), newServeProbeCmd(a))
	return cmd
}

// checkServe prints every problem of the daemon's configuration.
func (a *App) checkServe() error {
	errs := a.Core.CheckServe(a.user())
	if len(errs) == 0 {
		fmt.Fprintln(a.Stdout, "the configuration is valid")
		return nil
	}
	for _, err := range errs {
		fmt.Fprintln(a.Stderr, "fluffy:", termsafe.String(err.Error()))
	}
	return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%d problem(s) in the configuration", len(errs))}
}

// runServe runs the daemon with its log going to stderr and logs/serve.log.
func (a *App) runServe(ctx context.Context, wait bool) error {
	f, err := a.openLog(ServeLog, a.Stderr, nil)
	if err != nil {
		return err
	}
	defer f.Close()
	u := a.user()
	u.Stderr = io.MultiWriter(a.Stderr, f)
	// The socket held: an idle on-demand kernel hands it over; one
	// started meanwhile by another command is asked as well, within
	// takeoverWait of the first handover.
	var deadline time.Time
	for {
		err = a.Core.RunKernel(ctx, u, kernel.DaemonOptions{Serve: true})
		if !errors.Is(err, ipc.ErrInUse) {
			return kernelError(a, err)
		}
		sock, serr := a.kernelSocket()
		if serr != nil {
			return err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the socket %s is still held %v after the on-demand kernel handed it over; see 'fluffy kernel status'", sock, takeoverWait)}
		}
		terr := a.takeOver(ctx, sock, wait)
		switch {
		case errors.Is(terr, errNoHolder):
			// Its holder is exiting, or a kernel starts: try again
			// shortly.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(exitPoll):
			}
		case terr != nil:
			return terr
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(takeoverWait)
		}
	}
}

// printServeStatus adds the assistant daemon's readiness and channels to
// "fluffy status": what /readyz says, one line per channel.
func printServeStatus(w io.Writer, sv *kernel.ServeStatus) {
	if sv.Ready {
		fmt.Fprintf(w, "serve\tready\n")
	} else {
		fmt.Fprintf(w, "serve\tnot ready: %s\n", termsafe.String(strings.Join(sv.NotReady, "; ")))
	}
	if sv.Health != "" {
		fmt.Fprintf(w, "health\t%s\n", termsafe.String(sv.Health))
	}
	if sv.Listen != "" {
		fmt.Fprintf(w, "listen\t%s\n", termsafe.String(sv.Listen))
	}
	if sv.Web != "" {
		fmt.Fprintf(w, "web\t%s\n", termsafe.String(sv.Web))
	}
	if len(sv.Channels) == 0 {
		fmt.Fprintf(w, "channels\tnone configured\n")
	}
	for _, c := range sv.Channels {
		line := fmt.Sprintf("%s since %s, %d restarts", c.State, c.Since.Format("2006-01-02 15:04:05Z07:00"), c.Restarts)
		if c.LastError != "" {
			line += ", last error: " + c.LastError
		}
		fmt.Fprintf(w, "channel %s\t%s\n", termsafe.String(c.Name), termsafe.String(line))
	}
}
