package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

func newDoctorCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this machine offers fluffy, and how to fix what is missing",
		Long: `doctor checks the kernel, user namespaces, overlayfs, landlock, seccomp,
cgroups, container engines, the toolchains fluffy drives, the data directory
and free disk, one line each with OK, WARN or FAIL and how to fix it.

It exits 1 only when something fluffy cannot work without is missing for the
configured sandbox runtime (sandbox.runtime); warnings never fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			rep := doctor.Run(cmd.Context(), doctor.Options{
				Home:    l.Config.Home,
				Runtime: l.Config.Sandbox.Runtime,
				Getenv:  a.Getenv,
				Facilities: func(ctx context.Context) []sandbox.Facility {
					return native.Detect(ctx, native.DetectOptions{Self: a.Self})
				},
			})
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					Healthy bool `json:"healthy"`
					doctor.Report
				}{rep.Healthy(), rep}); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
				for _, c := range rep.Checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
					if c.Fix != "" && c.Status != doctor.OK {
						fmt.Fprintf(tw, "\t\t  fix: %s\n", c.Fix)
					}
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if !rep.Healthy() {
				return &ExitError{Code: ExitFailure, Msg: "a required facility is missing (FAIL above)"}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
