package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/backup"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/units"
)

func newBackupCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up fluffy.db and the audit log now; list, verify and restore backups",
		Long: `backup copies fluffy.db and audit.db into backups/<time>/ in the data
directory, consistently while a kernel or 'fluffy serve' writes them, with the
audit log's signed checkpoint beside the copy. The daemon takes one every
backup.interval and keeps backup.keep. See docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, keep, err := backupOptions(a)
			if err != nil {
				return err
			}
			b, err := backup.Create(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "backup %s: %d sessions, %d audit entries, in %s\n", b.Name, b.Sessions, b.AuditSize, b.Dir)
			removed, err := backup.Prune(o, keep)
			for _, r := range removed {
				fmt.Fprintf(a.Stdout, "removed the older backup %s (backup.keep: %d)\n", r, keep)
			}
			return err
		},
	}
	cmd.AddCommand(newBackupLsCmd(a), newBackupVerifyCmd(a), newBackupRestoreCmd(a))
	return cmd
}

func backupOptions(a *App) (backup.Options, int, error) {
	l, err := a.Config()
	if err != nil {
		return backup.Options{}, 0, err
	}
	d, err := datadir.New(l.Config.Home)
	if err != nil {
		return backup.Options{}, 0, err
	}
	return backup.Options{Data: d}, l.Config.Backup.Keep, nil
}

func newBackupLsCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the backups, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, _, err := backupOptions(a)
			if err != nil {
				return err
			}
			all, err := backup.List(o)
			if err != nil {
				return err
			}
			if len(all) == 0 {
				fmt.Fprintln(a.Stdout, "no backups yet ('fluffy backup' takes one)")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTAKEN\tSESSIONS\tAUDIT ENTRIES\tSIZE")
			for _, b := range all {
				if b.Err != nil {
					fmt.Fprintf(tw, "%s\t-\t-\t-\tunreadable: %v\n", b.Name, b.Err)
					continue
				}
				var size int64
				for _, f := range b.Files {
					size += f.Bytes
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", b.Name, b.Time.Local().Format(time.DateTime), b.Sessions, b.AuditSize, units.Size(size).Approx())
			}
			return tw.Flush()
		},
	}
}

func newBackupVerifyCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "verify [NAME]",
		Short: "Check a backup (default: the newest): file digests, integrity_check, the audit copy against its checkpoint and keys/audit.checkpoint",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, _, err := backupOptions(a)
			if err != nil {
				return err
			}
			name, err := backupName(o, args)
			if err != nil {
				return err
			}
			rep, err := backup.Verify(cmd.Context(), o, name, false)
			if err != nil {
				return &ExitError{Code: ExitFailure, Msg: err.Error()}
			}
			fmt.Fprintf(a.Stdout, "backup %s verifies: fluffy.db (%d sessions)", name, rep.Sessions)
			if ar := rep.Audit; ar != nil {
				fmt.Fprintf(a.Stdout, ", audit.db (entries up to %d, %d checkpoint signatures)", ar.Size, ar.Checkpoints)
				if ar.Behind > 0 {
					fmt.Fprintf(a.Stdout, "; the log in use has %d entries more", ar.Behind)
					switch {
					case ar.Diverges:
						fmt.Fprint(a.Stdout, ", and it does not begin with this copy: one of the two was rewritten since (run 'fluffy audit verify --full')")
					case ar.PrefixChecked:
						fmt.Fprint(a.Stdout, " and begins with this copy")
					}
				}
			}
			fmt.Fprintln(a.Stdout)
			return nil
		},
	}
}

// backupName is the backup args name, or the newest.
func backupName(o backup.Options, args []string) (string, error) {
	if len(args) == 1 {
		return args[0], nil
	}
	all, err := backup.List(o)
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", &ExitError{Code: ExitFailure, Msg: "no backups yet ('fluffy backup' takes one)"}
	}
	return all[0].Name, nil
}

func newBackupRestoreCmd(a *App) *cobra.Command {
	var only string
	cmd := &cobra.Command{
		Use:   "restore NAME",
		Short: "Put a backup back: verified first, the files in use moved aside (never deleted); refused while fluffy runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, _, err := backupOptions(a)
			if err != nil {
				return err
			}
			var p backup.Parts
			switch only {
			case "":
				p = backup.Parts{Main: true, Audit: true}
			case datadir.StateDB:
				p.Main = true
			case datadir.AuditDB:
				p.Audit = true
			default:
				return fmt.Errorf("%w: --only %q: want fluffy.db or audit.db", errUsage, only)
			}
			rep, err := backup.Restore(cmd.Context(), o, args[0], p)
			if errors.Is(err, backup.ErrRunning) || errors.Is(err, backup.ErrNotFound) {
				return &ExitError{Code: ExitFailure, Msg: err.Error()}
			}
			if err != nil {
				return err
			}
			var what []string
			if p.Main {
				what = append(what, datadir.StateDB)
			}
			if p.Audit {
				what = append(what, datadir.AuditDB)
			}
			fmt.Fprintf(a.Stdout, "restored %s from backup %s (taken %s)\n", strings.Join(what, " and "), rep.Backup.Name, rep.Backup.Time.Local().Format(time.DateTime))
			for _, s := range rep.Aside {
				fmt.Fprintf(a.Stdout, "kept: %s\n", s)
			}
			if len(rep.Lost) > 0 {
				fmt.Fprintf(a.Stdout, "lost (created after the backup): %s\n", strings.Join(rep.Lost, ", "))
			}
			if len(rep.RolledBack) > 0 {
				fmt.Fprintf(a.Stdout, "rolled back to their state at the backup: %s\n", strings.Join(rep.RolledBack, ", "))
			}
			if rep.LostUnknown != "" {
				fmt.Fprintf(a.Stdout, "the sessions since the backup could not be listed: %s\n", rep.LostUnknown)
			}
			if rep.AuditLost > 0 {
				fmt.Fprintf(a.Stdout, "the audit log in use had %d entries after the backup; they are in the files kept above\n", rep.AuditLost)
			}
			return recordRestore(cmd.Context(), a, rep, what)
		},
	}
	cmd.Flags().StringVar(&only, "only", "", "restore only fluffy.db or only audit.db")
	return cmd
}

// auditRestoreHint names the command that puts back the newest backup
// whose audit log verifies, for a kernel that refused a damaged log; ""
// when there is none.
func auditRestoreHint(a *App) string {
	o, _, err := backupOptions(a)
	if err != nil {
		return ""
	}
	b, _, err := backup.Newest(context.Background(), o, false)
	if err != nil {
		return "; there is no verified backup to restore (docs/troubleshooting.md#a-damaged-audit-log)"
	}
	return fmt.Sprintf("; to restore the newest verified backup (taken %s; the damaged files are kept beside it): fluffy backup restore %s --only audit.db (docs/troubleshooting.md#a-damaged-audit-log)",
		b.Time.Local().Format(time.DateTime), b.Name)
}

// recordRestore writes the restore into the audit log as it now is
// (backup.restore). The restore has happened either way: a log that
// cannot be written is reported, with the exit status of a failure.
func recordRestore(ctx context.Context, a *App, rep backup.RestoreReport, restored []string) error {
	l, err := openAuditLog(ctx, a)
	if err == nil {
		_, err = l.Append(ctx, audit.Entry{Kind: audit.KindBackupRestore, Actor: "user", Payload: audit.BackupRestore{
			Backup: rep.Backup.Name, Restored: restored, Aside: rep.Aside, Lost: rep.Lost, RolledBack: rep.RolledBack, AuditLost: rep.AuditLost}})
		if cerr := l.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("restored, but the restore is not recorded in the audit log: %v", err)}
	}
	return nil
}
