package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/units"
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
					return a.Core.SandboxFacilities(ctx, a.user())
				},
				Extra: []func(context.Context) doctor.Check{
					func(ctx context.Context) doctor.Check {
						return auditCheck(ctx, l.Config.Home, int64(l.Config.Audit.WarnSize))
					},
					func(context.Context) doctor.Check { return binariesCheck(a.Self) },
					func(context.Context) doctor.Check { return serverCheck(a) },
					func(ctx context.Context) doctor.Check { return memoryCheck(ctx, a) },
				},
			})
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
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

// auditCheck reports the audit log's size, entries and newest checkpoint,
// with the warnings the log itself defines (size past audit.warn_size, free
// disk running low). It reads only; a missing log is not a problem.
func auditCheck(ctx context.Context, home string, warnSize int64) doctor.Check {
	c := doctor.Check{Name: "audit log"}
	d, err := datadir.New(home)
	if err != nil {
		c.Status, c.Detail = doctor.Fail, err.Error()
		return c
	}
	s, err := audit.ReadStats(ctx, d.Path(datadir.AuditDB), d.Path(datadir.Keys))
	switch {
	case errors.Is(err, audit.ErrNoLog):
		c.Status, c.Detail = doctor.OK, "nothing recorded yet"
		return c
	case err != nil:
		c.Status, c.Detail, c.Fix = doctor.Warn, err.Error(), "run 'fluffy audit verify' to see what is wrong"
		return c
	}
	c.Status = doctor.OK
	c.Detail = fmt.Sprintf("%d entries, %s, newest checkpoint at %d", s.Entries, units.Size(s.Bytes).Approx(), s.Checkpoint)
	if w := s.Warnings(warnSize, 0); len(w) > 0 {
		c.Status, c.Fix = doctor.Warn, strings.Join(w, "; ")
	}
	return c
}

// binariesCheck reports how fluffy is installed: the small client
// (fluffy) beside the full build (fluffy-core) forwards a sandboxed command
// to the sandbox server instead of starting the whole program; a lone
// full build works, more slowly. doctor itself always runs in the full
// build.
func binariesCheck(self string) doctor.Check {
	c := doctor.Check{Name: "fluffy binaries"}
	dir := filepath.Dir(self)
	front := filepath.Join(dir, "fluffy")
	if filepath.Base(self) == "fluffy" || !fileExists(front) {
		c.Status = doctor.Warn
		c.Detail = self + " is the full build with no small client beside it: 'fluffy sandbox run' pays for starting all of fluffy and a sandbox (~40 ms) instead of using the sandbox server (~13 ms)"
		c.Fix = "make install (fluffy, fluffy-core and fluffy-sandbox-init side by side)"
		return c
	}
	c.Status, c.Detail = doctor.OK, fmt.Sprintf("%s (client) and %s (full build, sandbox server) in %s", "fluffy", filepath.Base(self), dir)
	return c
}

// serverCheck reports the sandbox server of this installation: whether its
// socket directory is safe to use, and whether a server runs.
func serverCheck(a *App) doctor.Check {
	c := doctor.Check{Name: "sandbox server"}
	if v, _ := a.Getenv("FLUFFY_SANDBOX_SERVER"); v == "off" {
		c.Status, c.Detail = doctor.OK, "off (FLUFFY_SANDBOX_SERVER=off): each 'fluffy sandbox run' runs in its own fluffy-core process"
		return c
	}
	if l, err := a.Config(); err == nil && l.Config.Sandbox.Server == "off" {
		c.Status, c.Detail = doctor.OK, "off (sandbox.server: off): each 'fluffy sandbox run' runs in its own fluffy-core process"
		return c
	}
	st, err := serverStatus(a)
	if err != nil {
		c.Status, c.Detail = doctor.Fail, err.Error()
		c.Fix = "fix the directory as the message says; until then 'fluffy sandbox run' runs without the server (slower)"
		var de *sandboxd.DirError
		if errors.As(err, &de) && de.Fix != "" {
			c.Fix = de.Fix
		}
		return c
	}
	c.Status = doctor.OK
	if st.Running() {
		c.Detail = fmt.Sprintf("running (pid %d), socket %s, log %s", st.PID, st.Socket, st.Log)
	} else {
		c.Detail = "not running; the next 'fluffy sandbox run' starts it (socket " + st.Socket + ")"
	}
	return c
}
