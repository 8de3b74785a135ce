package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/web"
)

func newWebCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "web",
		Short: "The web console of the running daemon: its address; 'open' for a login link",
		Long: `web prints the address of the web console that 'fluffy serve' runs when
serve.web.listen is set. 'fluffy web open' prints a one-time login link
(valid two minutes, good for one login) to paste into a browser. See
docs/web.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cl, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if cl == nil {
				return errNoConsole
			}
			defer cl.Close()
			var st kernel.DaemonStatus
			if err := cl.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
				return fmt.Errorf("web: %w", err)
			}
			if st.Serve == nil || st.Serve.Web == "" {
				return errNoConsole
			}
			fmt.Fprintf(a.Stdout, "%s (log in with 'fluffy web open')\n", termsafe.String(st.Serve.Web))
			return nil
		},
	}
	cmd.AddCommand(newWebOpenCmd(a))
	return cmd
}

var errNoConsole = &ExitError{Code: ExitFailure, Msg: "no web console is running: set serve.web.listen (e.g. 127.0.0.1:8484) and start 'fluffy serve'"}

func newWebOpenCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "open",
		Short: "Print a one-time login link to the web console",
		// The link is printed, never handed to a browser on its command
		// line: /proc shows a process's arguments to every local user,
		// who could redeem the token first.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cl, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if cl == nil {
				return errNoConsole
			}
			defer cl.Close()
			var res web.LoginResult
			err = cl.Call(ctx, web.MethodLogin, nil, &res)
			switch {
			case errors.Is(err, ipc.ErrUnknownMethod):
				return errNoConsole
			case err != nil:
				return fmt.Errorf("web open: %w", err)
			}
			fmt.Fprintln(a.Stdout, termsafe.String(res.URL))
			return nil
		},
	}
	return cmd
}
