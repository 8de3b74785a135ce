package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newSchedCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sched",
		Short: "The scheduler: what runs, what waits and why (docs/sched.md)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newSchedStatusCmd(a))
	return cmd
}

func newSchedStatusCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running kernel's queues, running tasks, and what each waiting task waits for; never starts a kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if c == nil {
				return &ExitError{Code: ExitFailure, Msg: "no kernel is running: nothing is scheduled"}
			}
			defer c.Close()
			var st sched.Status
			err = c.Call(ctx, sched.MethodStatus, nil, &st)
			switch {
			case errors.Is(err, ipc.ErrUnknownMethod):
				return &ExitError{Code: ExitFailure, Msg: "the running kernel has no scheduler (an older version): restart it with 'fluffy kernel stop'"}
			case err != nil:
				return fmt.Errorf("sched status: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printSched(a.Stdout, st, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// printSched is "fluffy sched status": the limits and their use, the
// queues, then every running and waiting task.
func printSched(w io.Writer, st sched.Status, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "in use\t%s\n", schedUse(st))
	fmt.Fprintf(tw, "queued\t%s\n", schedQueued(st))
	fmt.Fprintf(tw, "aging\t%s per class\n", st.Aging)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nrunning (%d)\n", len(st.Running))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Running) > 0 {
		fmt.Fprintln(tw, "  ID\tCLASS\tSESSION\tWHAT\tFOR\tHOLDS")
	}
	for _, t := range st.Running {
		what := termsafe.String(t.Label)
		if t.Pausing {
			what += " (pausing)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", termsafe.String(t.ID), t.Class, orDash(termsafe.String(t.Session)), what,
			now.Sub(t.Since).Round(time.Second), orDash(needs(t.Needs)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwaiting (%d)\n", queuedTotal(st))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Waiting) > 0 {
		fmt.Fprintln(tw, "  ID\tCLASS\tSESSION\tWHAT\tWAITED\tWHY")
	}
	for _, t := range st.Waiting {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\twaiting: %s\n", termsafe.String(t.ID), t.Class, orDash(termsafe.String(t.Session)),
			termsafe.String(t.Label), now.Sub(t.Since).Round(time.Second), termsafe.String(t.Why))
	}
	if n := queuedTotal(st) - len(st.Waiting); n > 0 {
		fmt.Fprintf(tw, "  ... and %d more\n", n)
	}
	return tw.Flush()
}

// schedUse is each limit with what is in use of it ("global 2/4, per
// session 1, sandboxes 1/2"): the global and per-session limits first,
// then the resources; model limits only for providers in use, and once
// for the rest.
func schedUse(st sched.Status) string {
	var out []string
	if lim, ok := st.Limits["global"]; ok {
		out = append(out, fmt.Sprintf("global %d/%d", st.Use["global"], lim))
	} else {
		out = append(out, fmt.Sprintf("global %d (no limit)", st.Use["global"]))
	}
	if lim, ok := st.Limits["per_session"]; ok {
		out = append(out, fmt.Sprintf("per session %d", lim))
	}
	var modelLimit int64
	for _, k := range slices.Sorted(maps.Keys(st.Limits)) {
		lim := st.Limits[k]
		switch {
		case k == "global" || k == "per_session":
			continue
		case strings.HasPrefix(k, "model:") && st.Use[k] == 0:
			modelLimit = lim
			continue
		case k == string(sched.Memory):
			out = append(out, fmt.Sprintf("memory %dMiB/%dMiB", st.Use[k]>>20, lim>>20))
			continue
		}
		out = append(out, fmt.Sprintf("%s %d/%d", k, st.Use[k], lim))
	}
	if modelLimit > 0 {
		out = append(out, fmt.Sprintf("model calls 0/%d per provider", modelLimit))
	}
	return strings.Join(out, ", ")
}

func schedQueued(st sched.Status) string {
	var out []string
	for _, c := range []sched.Class{sched.Interactive, sched.Triggered, sched.Background} {
		out = append(out, fmt.Sprintf("%d %s", st.Queued[c.String()], c))
	}
	return strings.Join(out, ", ")
}

func queuedTotal(st sched.Status) int {
	n := 0
	for _, q := range st.Queued {
		n += q
	}
	return n
}

func needs(n map[string]int64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		if k == string(sched.Memory) {
			out = append(out, fmt.Sprintf("%s %dMiB", k, n[k]>>20))
			continue
		}
		out = append(out, fmt.Sprintf("%s %d", k, n[k]))
	}
	return strings.Join(out, ", ")
}

// printSchedSummary is the scheduler's lines of "fluffy status".
func printSchedSummary(tw io.Writer, st *sched.Status) {
	fmt.Fprintf(tw, "sched\t%d running, %d waiting (%s)\n", len(st.Running), queuedTotal(*st), schedQueued(*st))
	fmt.Fprintf(tw, "  in use\t%s\n", schedUse(*st))
	for i, t := range st.Waiting {
		if i == 3 {
			fmt.Fprintf(tw, "  ...\t'fluffy sched status' lists them all\n")
			break
		}
		fmt.Fprintf(tw, "  %s\t%s %s: waiting: %s\n", termsafe.String(t.ID), t.Class, termsafe.String(t.Label), termsafe.String(t.Why))
	}
}
