package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/backup"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/store"
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
			extra := []func(context.Context) doctor.Check{
				func(ctx context.Context) doctor.Check {
					return auditCheck(ctx, l.Config.Home, int64(l.Config.Audit.WarnSize))
				},
				func(context.Context) doctor.Check { return binariesCheck(a.Self) },
				func(context.Context) doctor.Check { return serverCheck(a) },
				func(ctx context.Context) doctor.Check { return memoryCheck(ctx, a) },
				func(ctx context.Context) doctor.Check { return stateDBCheck(ctx, l.Config.Home) },
				func(ctx context.Context) doctor.Check {
					return backupsCheck(ctx, l.Config.Home, l.Config.Backup.Interval.Std())
				},
				func(context.Context) doctor.Check { return oomCheck(l.Config.Kernel.OOMProtect) },
			}
			extra = append(extra, secretChecks(a)...)
			rep := doctor.Run(cmd.Context(), doctor.Options{
				Home:    l.Config.Home,
				Runtime: l.Config.Sandbox.Runtime,
				Getenv:  a.Getenv,
				Facilities: func(ctx context.Context) []sandbox.Facility {
					return a.Core.SandboxFacilities(ctx, a.user())
				},
				Extra: extra,
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
					if c.Doc != "" && c.Status != doctor.OK {
						fmt.Fprintf(tw, "\t\t  see: %s\n", c.Doc)
					}
				}
				fmt.Fprintf(tw, "\nEach check has a section in %s (--json gives every check's link).\n", doctor.TroubleshootingDoc)
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
		// A file SQLite cannot read stops the kernel: say so, and how
		// to restore (only now: quick_check reads every page).
		if cerr := store.QuickCheck(ctx, d.Path(datadir.AuditDB)); errors.Is(cerr, store.ErrCorrupt) {
			c.Status, c.Required, c.Detail = doctor.Fail, true, cerr.Error()
			c.Fix = "the kernel will not start over it: 'fluffy backup ls', then 'fluffy backup restore NAME --only audit.db' (the damaged files are kept)"
		}
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

// stateDBCheck runs PRAGMA quick_check on fluffy.db, and reports a damaged
// file the kernel moved aside at a start (and the backup it restored) by
// the notice it left beside it.
func stateDBCheck(ctx context.Context, home string) doctor.Check {
	c := doctor.Check{Name: datadir.StateDB}
	d, err := datadir.New(home)
	if err != nil {
		c.Status, c.Detail = doctor.Fail, err.Error()
		return c
	}
	p := d.Path(datadir.StateDB)
	err = store.QuickCheck(ctx, p)
	switch {
	case errors.Is(err, store.ErrCorrupt):
		c.Status, c.Required, c.Detail = doctor.Fail, true, err.Error()
		c.Fix = "stop fluffy ('fluffy kernel stop'); the next start moves the file aside and restores the newest verified backup ('fluffy backup ls'), or run 'fluffy backup restore NAME --only fluffy.db'"
		return c
	case err != nil:
		c.Status, c.Detail = doctor.Warn, err.Error()
		return c
	}
	c.Status, c.Detail = doctor.OK, "quick_check ok"
	if notices, _ := filepath.Glob(p + ".damaged-*" + backup.NoticeSuffix); len(notices) > 0 {
		sort.Strings(notices)
		newest := notices[len(notices)-1]
		b, _ := os.ReadFile(newest)
		first, _, _ := strings.Cut(string(b), "\n")
		c.Status = doctor.Warn
		c.Detail = "quick_check ok; earlier: " + first
		c.Fix = "read " + newest + " for the sessions that were lost; delete the notice once you have"
	}
	return c
}

// backupsCheck reports the newest backup's age against backup.interval.
func backupsCheck(ctx context.Context, home string, interval time.Duration) doctor.Check {
	c := doctor.Check{Name: "backups"}
	d, err := datadir.New(home)
	if err != nil {
		c.Status, c.Detail = doctor.Fail, err.Error()
		return c
	}
	all, err := backup.List(backup.Options{Data: d})
	if err != nil {
		c.Status, c.Detail = doctor.Warn, err.Error()
		return c
	}
	var newest *backup.Backup
	for i := range all {
		if all[i].Err == nil {
			newest = &all[i]
			break
		}
	}
	if newest == nil {
		c.Status, c.Detail, c.Fix = doctor.Warn, "no backup yet: a damaged fluffy.db could not be restored", "run 'fluffy backup' (the daemon, 'fluffy serve', takes one every backup.interval)"
		return c
	}
	age := time.Since(newest.Time).Round(time.Minute)
	c.Status, c.Detail = doctor.OK, fmt.Sprintf("%d, the newest %s (%s ago, %d sessions)", len(all), newest.Name, age, newest.Sessions)
	if interval > 0 && age > 2*interval {
		c.Status, c.Fix = doctor.Warn, "the newest backup is older than twice backup.interval: run 'fluffy backup', and check the daemon's log for 'scheduled backup failed'"
	}
	return c
}

// oomCheck reports what this process may do to its oom_score_adj: a
// daemon started the same way lowers its own only with CAP_SYS_RESOURCE.
func oomCheck(protect bool) doctor.Check {
	c := doctor.Check{Name: "oom protection", Status: doctor.OK}
	if !protect {
		c.Detail = "off (kernel.oom_protect: false); sandboxes still raise their oom_score_adj to 1000"
		return c
	}
	cur, err := kernel.OOMScoreAdj(0)
	if err != nil {
		c.Status, c.Detail = doctor.Warn, err.Error()
		return c
	}
	if err := kernel.SetOOMScoreAdj(0, cur-1); err != nil {
		c.Detail = fmt.Sprintf("sandboxes raise their oom_score_adj to 1000; the daemon cannot lower its own (%d) without CAP_SYS_RESOURCE", cur)
		return c
	}
	_ = kernel.SetOOMScoreAdj(0, cur)
	c.Detail = fmt.Sprintf("sandboxes raise their oom_score_adj to 1000; the daemon lowers its own to %d", kernel.OOMScoreDaemon)
	return c
}

// secretChecks are one check per configured secret backend (its state,
// never a value); backends that cannot be built are one warning.
func secretChecks(a *App) []func(context.Context) doctor.Check {
	bs, err := a.user().SecretBackends(nil)
	if err != nil {
		return []func(context.Context) doctor.Check{func(context.Context) doctor.Check {
			return doctor.Check{Name: "secrets", Status: doctor.Warn, Detail: err.Error(), Fix: "see docs/secrets.md", Doc: doctor.TroubleshootingDoc + "#a-secret-backend-is-locked-or-unreachable"}
		}}
	}
	var names []string
	for n := range bs {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []func(context.Context) doctor.Check
	for _, n := range names {
		one := map[string]secret.Backend{n: bs[n]}
		out = append(out, func(ctx context.Context) doctor.Check { return doctor.SecretChecks(ctx, one)[0] })
	}
	return out
}
