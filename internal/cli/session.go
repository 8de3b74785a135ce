package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// taskFlags are the root command's flags for `fluffy "<task>"`.
type taskFlags struct {
	yes, noApply, asJSON bool
	model                string
}

// setupTaskCmd makes the root command run a task: fluffy "<task>".
func setupTaskCmd(a *App, root *cobra.Command) {
	var f taskFlags
	root.Use = `fluffy ["<task>"]`
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if f.yes && f.noApply {
			return fmt.Errorf("%w: --yes and --no-apply exclude each other", errUsage)
		}
		if len(args) == 0 {
			return a.interactive(cmd.Context(), f)
		}
		// One word is a mistyped command far more often than a task.
		if len(args) == 1 && !strings.ContainsAny(strings.TrimSpace(args[0]), " \t\n") {
			return fmt.Errorf("unknown command %q for \"fluffy\" (a task is a sentence: fluffy \"fix the failing test\")", args[0])
		}
		if f.yes && f.noApply {
			return fmt.Errorf("%w: --yes and --no-apply exclude each other", errUsage)
		}
		return a.runTask(cmd.Context(), strings.Join(args, " "), f)
	}
	fl := root.Flags()
	fl.BoolVarP(&f.yes, "yes", "y", false, "apply the change set at the end without asking")
	fl.BoolVar(&f.noApply, "no-apply", false, "keep the change set pending at the end (apply later with 'fluffy session close --apply')")
	fl.BoolVar(&f.asJSON, "json", false, "print the session's events as JSON lines (for scripts)")
	fl.StringVarP(&f.model, "model", "m", "", "model, as provider/name (default: the model configuration key)")
}

// repoRoot is the repository holding dir: the nearest ancestor with .git,
// else dir itself.
func repoRoot(dir string) string {
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			return dir
		}
		d = p
	}
}

func (a *App) runTask(ctx context.Context, task string, f taskFlags) error {
	k, done, err := a.openConsole(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	// Ctrl-C is the console's: the session outlives the first one.
	ctx = context.WithoutCancel(ctx)
	if err := k.create(ctx, task); err != nil {
		return err
	}
	return k.oneShot(ctx)
}

// reportInterrupted tells the user about sessions a dead kernel left.
func (a *App) reportInterrupted(ctx context.Context, c *ipc.Client) error {
	var list []kernel.Info
	if err := c.Call(ctx, kernel.MethodList, kernel.ListParams{}, &list); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	for _, s := range list {
		if s.Interrupted {
			fmt.Fprintf(a.Stderr, "fluffy: session %s was interrupted (the kernel stopped while it ran); its change set is intact.\n  resume it: fluffy session resume %s · review it: fluffy session diff %s\n", s.ID, s.ID, s.ID)
		}
	}
	return nil
}

// lostKernel is the error when the kernel goes away during a run.
func lostKernel(id string, err error) error {
	return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the kernel stopped during session %s (%v)\nfix: the session is resumable: fluffy session resume %s (kernel.log in the data directory says why it stopped)", id, err, id)}
}

// runExit maps how the run ended to the exit status.
func runExit(res kernel.RunResult) error {
	if res.Fault != nil {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%s error: %s", res.Fault.Class, res.Fault.Message)}
	}
	return nil
}

func newSessionCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{Use: "session", Short: "List, inspect, resume, close and remove sessions"}
	var all, asJSON, showTree bool
	ls := &cobra.Command{
		Use: "ls", Short: "List sessions (open ones; --all for closed too)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connectKernel(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			var list []kernel.Info
			if err := c.Call(cmd.Context(), kernel.MethodList, kernel.ListParams{All: all}, &list); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tMODEL\tTURNS\tTASK")
			for _, s := range list {
				st := string(s.Status)
				if s.Interrupted {
					st += " (interrupted, resumable)"
				}
				if s.Parent != "" {
					st += " (sub-agent of " + s.Parent + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.ID, st, termsafe.Line(s.Model), s.Turns, oneLine(s.Task, 60))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&all, "all", false, "include closed sessions")
	ls.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	show := &cobra.Command{
		Use: "show ID", Short: "Show a session and its sub-agents (JSON; --tree: as a tree)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				var t kernel.TreeNode
				if err := c.Call(cmd.Context(), kernel.MethodTree, kernel.IDParams{ID: args[0]}, &t); err != nil {
					return err
				}
				if showTree {
					writeTree(a.Stdout, t, "", "")
					return nil
				}
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(t)
			})
		},
	}
	show.Flags().BoolVar(&showTree, "tree", false, "print the session and its sub-agents as a tree: state, budget used, task")
	diff := &cobra.Command{
		Use: "diff ID", Short: "Show a session's pending change set", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				var d kernel.DiffResult
				if err := c.Call(cmd.Context(), kernel.MethodDiff, kernel.IDParams{ID: args[0]}, &d); err != nil {
					return err
				}
				if len(d.Changes) == 0 {
					fmt.Fprintln(a.Stdout, "no changes")
				}
				fmt.Fprint(a.Stdout, diffOut(a.Stdout, d.Diff))
				return nil
			})
		},
	}
	var rf taskFlags
	resume := &cobra.Command{
		Use: "resume ID", Short: "Continue a paused or interrupted session", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				k, err := a.newConsole(c, rf)
				if err != nil {
					return err
				}
				defer k.close()
				ctx := context.WithoutCancel(cmd.Context())
				var info kernel.Info
				if err := c.Call(ctx, kernel.MethodGet, kernel.IDParams{ID: args[0]}, &info); err != nil {
					return err
				}
				k.model = info.Model
				if err := k.attach(ctx, info.ID); err != nil {
					return err
				}
				return k.oneShot(ctx)
			})
		},
	}
	resume.Flags().BoolVarP(&rf.yes, "yes", "y", false, "apply the change set at the end without asking")
	resume.Flags().BoolVar(&rf.noApply, "no-apply", false, "keep the change set pending at the end")
	resume.Flags().BoolVar(&rf.asJSON, "json", false, "print events as JSON lines")
	var apply bool
	closeCmd := &cobra.Command{
		Use: "close ID", Short: "Close a session: discard its change set, or --apply it", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				var cr kernel.CloseResult
				if err := c.Call(cmd.Context(), kernel.MethodClose, kernel.CloseParams{ID: args[0], Apply: apply}, &cr); err != nil {
					return err
				}
				if apply {
					fmt.Fprintf(a.Stdout, "applied %d change(s); session %s closed\n", len(cr.Applied), args[0])
				} else {
					fmt.Fprintf(a.Stdout, "discarded the change set; session %s closed\n", args[0])
				}
				return nil
			})
		},
	}
	closeCmd.Flags().BoolVar(&apply, "apply", false, "apply the change set to the working tree")
	var force bool
	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove closed sessions (--force: open ones too, discarding their changes)",
		Long: `rm deletes sessions from fluffy.db (their conversation, TDD history and
change set directory). The audit log keeps every entry about them: it is
append-only, and records the removal as session.rm. An open session is
refused unless --force, which discards its pending changes; a running one
is always refused.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				var failed int
				for _, id := range args {
					var rr kernel.RemoveResult
					if err := c.Call(cmd.Context(), kernel.MethodRemove, kernel.RemoveParams{ID: id, Force: force}, &rr); err != nil {
						fmt.Fprintf(a.Stderr, "fluffy: session rm %s: %v\n", id, err)
						failed++
						continue
					}
					if rr.Discarded {
						fmt.Fprintf(a.Stdout, "removed session %s (its pending changes discarded)\n", id)
					} else {
						fmt.Fprintf(a.Stdout, "removed session %s\n", id)
					}
				}
				if failed > 0 {
					return &ExitError{Code: ExitFailure}
				}
				return nil
			})
		},
	}
	rm.Flags().BoolVar(&force, "force", false, "also remove open sessions, discarding their pending changes")
	cmd.AddCommand(ls, show, diff, resume, closeCmd, rm)
	return cmd
}

func (a *App) withKernel(ctx context.Context, fn func(*ipc.Client) error) error {
	c, err := a.connectKernel(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// writeTree prints a session and its sub-agents, one line each: id,
// state, what it used of its budget, task.
func writeTree(w io.Writer, n kernel.TreeNode, lead, childLead string) {
	fmt.Fprintf(w, "%s%s %s", lead, n.ID, n.Status)
	if n.StopReason != "" {
		fmt.Fprintf(w, " (%s)", termsafe.Line(n.StopReason))
	}
	fmt.Fprintf(w, " · %d", n.Turns)
	if n.Narrowing != nil && n.Narrowing.Budget.Turns > 0 {
		fmt.Fprintf(w, "/%d", n.Narrowing.Budget.Turns)
	}
	fmt.Fprintf(w, " turns · %d", n.Usage.Total())
	if n.Narrowing != nil && n.Narrowing.Budget.Tokens > 0 {
		fmt.Fprintf(w, "/%d", n.Narrowing.Budget.Tokens)
	}
	fmt.Fprintf(w, " tokens · $%.4f", n.Cost)
	if n.Narrowing != nil && n.Narrowing.Budget.Cost > 0 {
		fmt.Fprintf(w, "/$%.4f", n.Narrowing.Budget.Cost)
	}
	if n.Untrusted != "" {
		fmt.Fprint(w, " · untrusted")
	}
	fmt.Fprintf(w, " · %s\n", oneLine(n.Task, 60))
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			writeTree(w, c, childLead+"└─ ", childLead+"   ")
		} else {
			writeTree(w, c, childLead+"├─ ", childLead+"│  ")
		}
	}
}
