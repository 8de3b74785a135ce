package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// changesFlags are shared by the changeset subcommands.
type changesFlags struct {
	dir       string
	workspace string
	session   string
}

// add adds the flags; withSession for the commands that also work on a
// session's change set.
func (f *changesFlags) add(cmd *cobra.Command, withSession bool) {
	cmd.Flags().StringVar(&f.dir, "changeset", "", "change set directory (from 'fluffy changeset begin'), or a bare overlay upper directory with --workspace")
	if !withSession {
		cmd.Flags().StringVar(&f.workspace, "workspace", "", "workspace (the overlay lower layer); default the current directory")
		_ = cmd.MarkFlagRequired("changeset")
		return
	}
	cmd.Flags().StringVar(&f.workspace, "workspace", "", "with --changeset: the workspace (required for a bare upper); otherwise: the repository whose latest session to use (default: the one holding the current directory)")
	cmd.Flags().StringVar(&f.session, "session", "", "the session whose change set to use (default: the latest session of this repository)")
}

// standalone reports whether the command works on a change set directory
// rather than a session's; naming both is a usage error.
func (f *changesFlags) standalone() (bool, error) {
	if f.dir != "" && f.session != "" {
		return false, fmt.Errorf("%w: --changeset and --session exclude each other", errUsage)
	}
	return f.dir != "", nil
}

func (f *changesFlags) open(a *App) (*changeset.ChangeSet, error) {
	dir := f.dir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(a.Cwd, dir)
	}
	ws := f.workspace
	if ws != "" && !filepath.IsAbs(ws) {
		ws = filepath.Join(a.Cwd, ws)
	}
	if fileExists(filepath.Join(dir, "changeset.json")) {
		cs, err := changeset.Open(dir, ws)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		if err := protectOwn(a, cs); err != nil {
			return nil, err
		}
		// Keep base copies of what a sandbox changed while the real files
		// are still the base: a later conflict shows three versions.
		if _, err := cs.KeepBases(context.Background()); err != nil {
			return nil, err
		}
		return cs, nil
	}
	if ws == "" {
		return nil, fmt.Errorf("%w: %s is not a change set: pass --workspace to read it as a bare overlay upper directory", errUsage, f.dir)
	}
	cs, err := changeset.OpenUpper(dir, ws)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return cs, protectOwn(a, cs)
}

// protectOwn keeps every apply of cs off fluffy's own files.
func protectOwn(a *App, cs *changeset.ChangeSet) error {
	own, err := a.user().OwnFiles(cs.Workspace())
	if err != nil {
		return err
	}
	cs.Protect(own)
	return nil
}

func newChangesCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "changeset",
		Aliases: []string{"changes"},
		Short:   "Review, apply or discard a session's change set (or a change set directory)",
		Long: `A change set holds a session's writes as an overlay upper directory over the
workspace. Nothing reaches the real tree until 'fluffy changeset apply', which
is all-or-nothing and refuses, showing the three versions (base, change set,
current file), when a file changed in the workspace since the change set
began. FILES select paths (a directory selects everything below).

Without --changeset the commands work on a session's change set: --session ID,
or by default the latest session of the repository holding the current
directory. The running kernel does the work when there is one (apply and
discard are refused while the session runs); otherwise the command works on
the data directory itself. --changeset DIR works on a change set directory
made by 'fluffy changeset begin' (or a bare upper with --workspace).`,
	}
	cmd.AddCommand(newChangesBeginCmd(a), newChangesLsCmd(a), newChangesDiffCmd(a), newChangesApplyCmd(a), newChangesDiscardCmd(a))
	return cmd
}

func newChangesBeginCmd(a *App) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "begin --changeset DIR [--workspace DIR]",
		Short: "Create a change set over a workspace (default: the current directory) and record its base",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws := f.workspace
			if ws == "" {
				ws = a.Cwd
			} else if !filepath.IsAbs(ws) {
				ws = filepath.Join(a.Cwd, ws)
			}
			dir := f.dir
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(a.Cwd, dir)
			}
			cs, err := changeset.Begin(cmd.Context(), ws, dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "workspace %s\nupperdir  %s\nworkdir   %s\n", cs.Workspace(), cs.UpperDir(), cs.WorkDir())
			return nil
		},
	}
	f.add(cmd, false)
	return cmd
}

func newChangesLsCmd(a *App) *cobra.Command {
	var f changesFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--session ID | --changeset DIR] [FILES...]",
		Short: "List changed paths: A added, M modified, D deleted",
		RunE: func(cmd *cobra.Command, args []string) error {
			if alone, err := f.standalone(); err != nil || !alone {
				if err != nil {
					return err
				}
				return a.runSessionChanges(cmd.Context(), "ls", &f, args, asJSON)
			}
			cs, err := f.open(a)
			if err != nil {
				return err
			}
			ch, err := cs.Changes(cmd.Context(), args...)
			if err != nil {
				return wrapPathErr(err)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				if ch == nil {
					ch = []changeset.Change{}
				}
				return enc.Encode(ch)
			}
			for _, c := range ch {
				fmt.Fprintln(a.Stdout, changeLine(c))
			}
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func changeLine(c changeset.Change) string {
	letter := map[changeset.Op]string{changeset.Added: "A", changeset.Modified: "M", changeset.Deleted: "D"}[c.Op]
	// Names and targets are the sandbox's bytes (termsafe escapes them);
	// modes show setuid, setgid and sticky, which apply sets.
	s := fmt.Sprintf("%s %-7s %s", letter, c.Kind, termsafe.Line(c.Path))
	switch {
	case c.Kind == changeset.KindSymlink && c.Op != changeset.Deleted:
		s += " -> " + termsafe.Line(c.NewTarget)
	case c.Op == changeset.Modified && c.OldMode != c.NewMode:
		s += fmt.Sprintf(" (mode %s -> %s)", changeset.ModeString(c.OldMode), changeset.ModeString(c.NewMode))
	case c.Op == changeset.Added && c.Kind != changeset.KindSymlink && c.NewMode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|0o022) != 0:
		s += fmt.Sprintf(" (mode %s)", changeset.ModeString(c.NewMode))
	}
	return s
}

func newChangesDiffCmd(a *App) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "diff [--session ID | --changeset DIR] [FILES...]",
		Short: "Show the change set as a unified diff",
		RunE: func(cmd *cobra.Command, args []string) error {
			if alone, err := f.standalone(); err != nil || !alone {
				if err != nil {
					return err
				}
				return a.runSessionChanges(cmd.Context(), "diff", &f, args, false)
			}
			cs, err := f.open(a)
			if err != nil {
				return err
			}
			d, err := cs.Diff(cmd.Context(), args...)
			if err != nil {
				return wrapPathErr(err)
			}
			ch, err := cs.Changes(cmd.Context(), args...)
			if err != nil {
				return wrapPathErr(err)
			}
			fmt.Fprint(a.Stdout, termsafe.String(kernel.SkillReview(cs, ch)))
			fmt.Fprint(a.Stdout, diffOut(a.Stdout, d))
			return nil
		},
	}
	f.add(cmd, true)
	return cmd
}

func newChangesApplyCmd(a *App) *cobra.Command {
	var f changesFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "apply [--session ID | --changeset DIR] [FILES...]",
		Short: "Apply the change set (or the selected paths) to the workspace, all or nothing",
		RunE: func(cmd *cobra.Command, args []string) error {
			if alone, err := f.standalone(); err != nil || !alone {
				if err != nil {
					return err
				}
				return a.runSessionChanges(cmd.Context(), "apply", &f, args, asJSON)
			}
			cs, err := f.open(a)
			if err != nil {
				return err
			}
			unlock, err := lockUpper(cmd.Context(), cs.UpperDir())
			if err != nil {
				return err
			}
			defer unlock()
			applied, err := cs.Apply(cmd.Context(), args...)
			var ce *changeset.ConflictError
			if errors.As(err, &ce) {
				return fmt.Errorf("%w\nreview with 'fluffy changeset diff', then apply the other paths by naming them, or discard the conflicting ones", err)
			}
			if err != nil {
				return wrapPathErr(err)
			}
			for _, c := range applied {
				fmt.Fprintln(a.Stdout, changeLine(c))
			}
			fmt.Fprintf(a.Stdout, "applied %d change(s) to %s\n", len(applied), termsafe.Line(cs.Workspace()))
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "with a session: print the result (applied changes, or the conflicts with their three versions) as JSON")
	return cmd
}

func newChangesDiscardCmd(a *App) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "discard [--session ID | --changeset DIR] [FILES...]",
		Short: "Drop the change set's changes (or those at the selected paths)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if alone, err := f.standalone(); err != nil || !alone {
				if err != nil {
					return err
				}
				return a.runSessionChanges(cmd.Context(), "discard", &f, args, false)
			}
			cs, err := f.open(a)
			if err != nil {
				return err
			}
			unlock, err := lockUpper(cmd.Context(), cs.UpperDir())
			if err != nil {
				return err
			}
			defer unlock()
			if err := cs.Discard(cmd.Context(), args...); err != nil {
				return wrapPathErr(err)
			}
			fmt.Fprintln(a.Stdout, "discarded")
			return nil
		},
	}
	f.add(cmd, true)
	return cmd
}

// wrapPathErr makes an invalid path a usage error.
func wrapPathErr(err error) error {
	if errors.Is(err, changeset.ErrBadPath) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}
