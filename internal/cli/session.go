package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/builtin"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/wiring"
)

// instructions is fluffy's own part of every session's system prompt.
const instructions = `You are fluffy, a coding agent. Work in small steps through the tools you are given.
Every tool call passes fluffy's gates (test-first state machine, policy, approval) and runs in a sandbox;
your writes land in a change set the user reviews before anything reaches the working tree.
When a call is refused, read the reason and adapt.`

// startSessions opens what the kernel's sessions run on (fluffy.db, the
// audit log, verified, the TDD machine) and registers the session methods
// on mux. The returned func stops the sessions and closes everything.
func (a *App) startSessions(ctx context.Context, mux *ipc.Mux, log *slog.Logger, refused *refusals, broker *approval.Broker, notify *kernelNotifier, publish func(string, any)) (func(), error) {
	l, err := a.Config()
	if err != nil {
		return nil, err
	}
	d, err := a.DataDir()
	if err != nil {
		return nil, err
	}
	db, err := store.OpenMain(ctx, d.Root)
	if err != nil {
		return nil, fmt.Errorf("open fluffy.db: %w", err)
	}
	// The kernel holds the audit log's writer lock only while it writes
	// (then for 2s more), so other commands can write between sessions.
	al := a.user().SharedAudit(2 * time.Second)
	if err := al.Use(ctx, func(*audit.Log) error { return nil }); err != nil {
		db.Close()
		return nil, &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the kernel cannot open the audit log: %v", err)}
	}
	fail := func(err error) (func(), error) {
		al.Close()
		db.Close()
		return nil, err
	}
	c := l.Config.TDD
	m, err := tdd.New(tdd.Options{TestPatterns: c.TestPatterns, ExemptPatterns: c.ExemptPatterns, BudgetPercent: c.DebtBudget})
	if err != nil {
		return fail(fmt.Errorf("%w: invalid configuration: tdd: %w", errUsage, err))
	}
	mode, err := tdd.ParseMode(c.Mode)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", errUsage, err))
	}
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: db})
	if err != nil {
		return fail(err)
	}
	// Approved plan steps become capability tokens, signed with the
	// kernel's token key; without a key they are honoured once by their
	// exact operation signature.
	toks, grants, err := a.user().ApprovalTokens()
	if err != nil {
		log.Warn("no capability tokens: approved plan steps are honoured once by signature", "err", err)
	}
	// A closed or removed session's tokens and approvals "for session"
	// end with it.
	var revokers []kernel.Revoker
	if broker != nil {
		revokers = append(revokers, broker)
	}
	if toks != nil {
		revokers = append(revokers, toks, grants)
	}
	ag := l.Config.Agent
	copts := catalog.Options{Env: a.Getenv, BaseURLs: l.Config.LLM.BaseURLs,
		Retry: llm.RetryOptions{Attempts: l.Config.LLM.RetryAttempts, MaxElapsed: l.Config.LLM.RetryBudget.Std(), Logger: log}}
	k, err := kernel.Start(ctx, kernel.Options{
		DB: db, Audit: al, DataDir: d,
		Models: func(ctx context.Context, model string) (llm.Provider, string, error) {
			return catalog.Open(ctx, model, copts)
		},
		Tools: a.sessionTools(log, broker, toks, grants),
		TDD:   &kernel.TDDOptions{Machine: m, Journal: j, Mode: mode},
		Limits: agent.Limits{MaxTurns: ag.MaxTurns, MaxTokens: ag.MaxTokens, MaxCost: ag.MaxCost, MaxTime: ag.MaxTime.Std(),
			ContextTokens: ag.ContextTokens, ToolResultBytes: int(ag.ToolResultLimit)},
		Instructions: instructions, Publish: publish, Logger: log, Approvals: broker, Revokers: revokers,
		AutoApply: a.autoApplyOptions(),
		OwnFiles:  a.user().KernelOwnFiles,
		Price: func(model string) llm.Price {
			p := l.Config.LLM.Prices[model]
			return llm.Price{Input: p.Input, Output: p.Output, CacheRead: p.CacheRead, CacheWrite: p.CacheWrite}
		},
	})
	if errors.Is(err, kernel.ErrAuditDamaged) {
		return fail(&ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the kernel refuses to start: %v\nfix: inspect it with 'fluffy audit verify --full'; the kernel will not run sessions over a damaged audit log", err)})
	}
	if err != nil {
		return fail(err)
	}
	notify.k = k
	refused.audit.Store(al)
	if err := k.Register(mux); err != nil {
		return fail(err)
	}
	return func() {
		refused.audit.Store(nil)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := k.Stop(sctx, "kernel exit"); err != nil {
			log.Error("stop sessions", "err", err)
		}
		if err := al.Close(); err != nil {
			log.Error("close the audit log", "err", err)
		}
		db.Close()
	}, nil
}

// sessionTools builds each session's tool router: the built-in tools over
// the session's change set, the TDD machine as the state gate, the policy
// of the session's workspace, and the sandbox runtime sandbox.runtime
// resolves to for shell.exec and test.run (when none is usable, those
// calls are refused).
func (a *App) sessionTools(log *slog.Logger, approver router.Approver, toks *policy.Tokens, grants *approval.Grants) kernel.ToolsFactory {
	// Resolved at the first session, not at kernel start (detection
	// starts a probe sandbox).
	runtime := sync.OnceValues(func() (sandbox.Runtime, string) { return wiring.SessionRuntime(context.Background(), a.user(), log) })
	l, _ := a.Config()
	// Sessions have no network: Go builds use the toolchain and modules
	// at hand rather than trying to fetch others.
	sandboxEnv := append(a.user().SandboxEnv(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off")
	return func(_ context.Context, env kernel.Env) (agent.Tools, error) {
		res, err := tool.NewResolver(tool.ResolverOptions{Workspace: env.Workspace, FS: env.ChangeSet.Links()})
		if err != nil {
			return nil, err
		}
		reg := tool.NewRegistry()
		if err := builtin.Register(reg, builtin.Options{ChangeSet: env.ChangeSet, Resolver: res, Git: builtin.GitOptions{AuthorName: l.Config.Git.AuthorName, AuthorEmail: l.Config.Git.AuthorEmail}}); err != nil {
			return nil, err
		}
		// The policy is the one of the session's workspace.
		eng, _, err := a.user().WithCwd(env.Workspace).PolicyEngine(toks)
		if err != nil {
			return nil, err
		}
		o := router.Options{Registry: reg, Resolver: res, Policy: eng, Audit: env.Audit, ChangeSet: env.ChangeSet,
			Session: operation.Session{ID: env.Session, Workspace: res.Workspace()}, Actor: "agent", Logger: log.With("session", env.Session),
			Approver: approver}
		if grants != nil {
			o.Grants = grants
		}
		if env.TDD != nil {
			o.State = env.TDD
		}
		if rt, name := runtime(); rt != nil {
			o.Runtime, o.RuntimeName = rt, name
			o.Env = sandboxEnv
			o.CacheDir = a.user().CacheDir()
			if o.Masks, err = a.user().SandboxMasks(res.Workspace()); err != nil {
				return nil, err
			}
		}
		return router.New(o)
	}
}

// kernelNotifier shows approval requests through the kernel, which exists
// only after the broker does.
type kernelNotifier struct{ k *kernel.Kernel }

func (n *kernelNotifier) Notify(ctx context.Context, req approval.Request) error {
	if n.k == nil {
		return errors.New("the kernel is not ready")
	}
	return n.k.Notify(ctx, req)
}

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
	var all, asJSON bool
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.ID, st, termsafe.Line(s.Model), s.Turns, oneLine(s.Task, 60))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&all, "all", false, "include closed sessions")
	ls.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	show := &cobra.Command{
		Use: "show ID", Short: "Show a session", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withKernel(cmd.Context(), func(c *ipc.Client) error {
				var i kernel.Info
				if err := c.Call(cmd.Context(), kernel.MethodGet, kernel.IDParams{ID: args[0]}, &i); err != nil {
					return err
				}
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(i)
			})
		},
	}
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
