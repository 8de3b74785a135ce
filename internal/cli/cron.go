package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/channel/cron"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newCronCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "List, run and show the history of the assistant daemon's scheduled jobs",
		Long: `cron shows the jobs of serve.cron and the heartbeat (serve.heartbeat):
'ls' and 'history' read the schedule's state in the data directory and need
no daemon; 'run' fires a job now through the running 'fluffy serve'.
See docs/cron.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newCronLsCmd(a), newCronRunCmd(a), newCronHistoryCmd(a))
	return cmd
}

// cronChannel builds the schedule from the configuration, without
// running it.
func (a *App) cronChannel() (*cron.Cron, string, error) {
	l, err := a.Config()
	if err != nil {
		return nil, "", err
	}
	d, err := a.DataDir()
	if err != nil {
		return nil, "", err
	}
	home, _ := a.Getenv("HOME")
	dir := cron.StateDir(d)
	c, err := cron.New(cron.ConfigFrom(l, home), cron.Options{StateDir: dir, Logger: a.Logger()})
	if err != nil {
		return nil, "", &ExitError{Code: ExitUsage, Msg: err.Error()}
	}
	return c, dir, nil
}

func newCronLsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the jobs: schedule, next run in the job's zone, last run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := a.cronChannel()
			if err != nil {
				return err
			}
			st, err := c.Status(time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			if len(st) == 0 {
				fmt.Fprintln(a.Stdout, "no jobs (serve.cron is empty and serve.heartbeat is 0)")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSCHEDULE\tZONE\tNEXT\tLAST\tMISSED")
			for _, j := range st {
				next, last := "-", "never"
				if !j.Next.IsZero() {
					next = j.Next.Format("2006-01-02 15:04 MST")
				}
				if j.Last != nil {
					last = j.Last.ScheduledFor.In(j.Next.Location()).Format("2006-01-02 15:04 MST") + " " + string(j.Last.Outcome)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.String(j.Name), termsafe.String(j.Schedule), j.TimeZone, next, last, j.Missed)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newCronHistoryCmd(a *App) *cobra.Command {
	var (
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "history [NAME]",
		Short: "Show the runs of every job (or of NAME), newest first",
		Long: `history shows each run: the slot it was for, why it ran (schedule, missed:
run_once after the daemon was down, manual: fluffy cron run), and its outcome:
delivered (queued to a session), failed (retried at the next slot), skipped
(missed while the daemon was down, or the heartbeat had nothing to do) or
started (the daemon stopped before it knew).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, dir, err := a.cronChannel()
			if err != nil {
				return err
			}
			job := ""
			if len(args) == 1 {
				job = args[0]
			}
			recs, err := cron.ReadHistory(dir)
			if err != nil {
				return err
			}
			runs := cron.Runs(recs, job)
			if job != "" && len(runs) == 0 && !slices.Contains(c.Jobs(), job) {
				return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("no job %q (fluffy cron ls lists them)", job)}
			}
			for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
				runs[i], runs[j] = runs[j], runs[i]
			}
			if limit > 0 && len(runs) > limit {
				runs = runs[:limit]
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(runs)
			}
			if len(runs) == 0 {
				fmt.Fprintln(a.Stdout, "no runs yet")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tJOB\tSCHEDULED FOR\tTRIGGER\tOUTCOME\tSESSION\tDETAIL")
			for _, r := range runs {
				detail := r.Detail
				if r.Missed > 0 {
					detail = fmt.Sprintf("%d earlier slot(s) missed. %s", r.Missed, detail)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, termsafe.String(r.Job), r.ScheduledFor.Format("2006-01-02 15:04 -07:00"),
					r.Trigger, r.Outcome, termsafe.String(orDash(r.Session)), termsafe.String(orDash(detail)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show at most this many runs (0: all)")
	return cmd
}

func newCronRunCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Fire a job now through the running daemon (fluffy serve); its schedule is unchanged",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, _, err := a.cronChannel()
			if err != nil {
				return err
			}
			if !slices.Contains(c.Jobs(), args[0]) {
				return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("no job %q (fluffy cron ls lists them)", args[0])}
			}
			cl, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if cl == nil {
				return &ExitError{Code: ExitFailure, Msg: "no daemon is running: a job runs through 'fluffy serve'; start it first"}
			}
			defer cl.Close()
			var run cron.Run
			err = cl.Call(ctx, cron.MethodRun, cron.RunParams{Name: args[0]}, &run)
			var ie *ipc.Error
			switch {
			case errors.Is(err, ipc.ErrUnknownMethod):
				return &ExitError{Code: ExitFailure, Msg: "the running kernel is not 'fluffy serve' (it runs no schedule); start 'fluffy serve'"}
			case errors.As(err, &ie) && (ie.Code == cron.CodeUnknownJob || ie.Code == ipc.CodeUnavailable):
				return &ExitError{Code: ExitFailure, Msg: "the daemon: " + ie.Message}
			case err != nil:
				return fmt.Errorf("cron run: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(run)
			}
			switch run.Outcome {
			case cron.Delivered:
				fmt.Fprintf(a.Stdout, "%s: run %s delivered to session %s\n", termsafe.String(run.Job), run.ID, termsafe.String(run.Session))
			case cron.Skipped:
				fmt.Fprintf(a.Stdout, "%s: run %s skipped: %s\n", termsafe.String(run.Job), run.ID, termsafe.String(run.Detail))
			default:
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%s: run %s %s: %s", termsafe.String(run.Job), run.ID, run.Outcome, termsafe.String(run.Detail))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
