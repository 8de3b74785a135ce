package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newTDDCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tdd",
		Short: "Inspect a session's test-first state machine; switch its mode",
	}
	cmd.AddCommand(newTDDStatusCmd(a), newTDDModeCmd(a), newTDDParseCmd(a))
	return cmd
}

// openTDD opens fluffy.db and the machine built from configuration.
func (a *App) openTDD(ctx context.Context) (*store.DB, *tdd.Journal, *tdd.Machine, tdd.Mode, error) {
	l, err := a.Config()
	if err != nil {
		return nil, nil, nil, "", err
	}
	c := l.Config.TDD
	m, err := tdd.New(tdd.Options{TestPatterns: c.TestPatterns, ExemptPatterns: c.ExemptPatterns, BudgetPercent: c.DebtBudget})
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("%w: invalid configuration: tdd: %w", errUsage, err)
	}
	mode, err := tdd.ParseMode(c.Mode)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("%w: %w", errUsage, err)
	}
	d, err := a.DataDir()
	if err != nil {
		return nil, nil, nil, "", err
	}
	db, err := store.OpenMain(ctx, d.Root)
	if err != nil {
		return nil, nil, nil, "", err
	}
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: db})
	if err != nil {
		db.Close()
		return nil, nil, nil, "", err
	}
	return db, j, m, mode, nil
}

// tddStatus is what `fluffy tdd status --json` prints.
type tddStatus struct {
	Session      string      `json:"session"`
	Started      bool        `json:"started"`
	Mode         tdd.Mode    `json:"mode"`
	State        tdd.State   `json:"state"`
	Cycle        int         `json:"cycle"`
	Transitions  int64       `json:"transitions"`
	RedSeq       int64       `json:"red_seq,omitempty"`
	GreenSeq     int64       `json:"green_seq,omitempty"`
	CycleTests   []string    `json:"cycle_tests"`
	Debt         []tdd.Debt  `json:"debt"`
	Instrumented []string    `json:"instrumented"`
	LastRun      *tdd.Run    `json:"last_run"`
	Next         string      `json:"next"`
	LastChange   *tdd.Record `json:"last_transition,omitempty"`
	Head         string      `json:"head,omitempty"`
	Verified     bool        `json:"verified"`
}

func newTDDStatusCmd(a *App) *cobra.Command {
	var session string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a session's TDD state, mode, tech debt and last test run",
		Long: `Show a session's TDD state, mode, tech debt and last test run.

The session's journal is replayed and its hash chain verified first: a
history edited in the database is reported (exit status 1), never shown as
if it were true. Without --session, the most recently active session.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			db, j, _, mode, err := a.openTDD(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			if session == "" {
				ids, err := j.Sessions(ctx)
				if err != nil {
					return err
				}
				if len(ids) == 0 {
					return errors.New("no session has a TDD journal yet; name one with --session")
				}
				session = ids[0]
			}
			s, recs, head, err := j.Load(ctx, session)
			if err != nil {
				return err
			}
			out := tddStatus{Session: session, Started: s.Seq > 0, Mode: s.Mode, State: s.State, Cycle: s.Cycle, Next: s.Next(),
				Transitions: s.Seq, RedSeq: s.RedSeq, GreenSeq: s.GreenSeq, CycleTests: nonNil(s.CycleTests),
				Debt: s.Debt, Instrumented: nonNil(s.Instrumented), LastRun: s.LastRun, Verified: true}
			if out.Debt == nil {
				out.Debt = []tdd.Debt{}
			}
			if !out.Started {
				out.Mode = mode
			} else {
				out.Head = fmt.Sprintf("%x", head)
				out.LastChange = &recs[len(recs)-1]
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			printTDDStatus(a.Stdout, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "session id (default: the most recently active)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func printTDDStatus(w io.Writer, s tddStatus) {
	// Values hold test names and paths from a test run's output.
	row := func(k, v string) { fmt.Fprintf(w, "%-13s %s\n", k, termsafe.Line(v)) }
	row("session", s.Session)
	row("mode", string(s.Mode))
	if !s.Started {
		row("state", string(s.State)+" (not started)")
		return
	}
	row("state", string(s.State))
	row("next", s.Next)
	row("cycle", fmt.Sprint(s.Cycle))
	if len(s.CycleTests) > 0 {
		row("tests", strings.Join(s.CycleTests, ", "))
	}
	switch {
	case s.RedSeq > 0 && s.GreenSeq > s.RedSeq:
		row("red/green", fmt.Sprintf("failing test seen at transition %d, passing at %d", s.RedSeq, s.GreenSeq))
	case s.RedSeq > 0:
		row("red/green", fmt.Sprintf("failing test seen at transition %d", s.RedSeq))
	default:
		row("red/green", "no failing test seen in this cycle")
	}
	if len(s.Debt) == 0 {
		row("debt", "none")
	} else {
		for i, d := range s.Debt {
			k := ""
			if i == 0 {
				k = "debt"
			}
			row(k, fmt.Sprintf("%s (since transition %d)", d.Path, d.Seq))
		}
	}
	if len(s.Instrumented) > 0 {
		row("instrumented", strings.Join(s.Instrumented, ", ")+" (reverted when debug mode ends)")
	}
	if r := s.LastRun; r == nil {
		row("last run", "none")
	} else {
		extra := ""
		if r.BuildFailed {
			extra = ", build failed"
		}
		row("last run", fmt.Sprintf("%s %s: %d passed, %d failed, %d skipped%s (transition %d)", r.Runner, r.Outcome, r.Passed, r.Failed, r.Skipped, extra, r.Seq))
		for _, f := range r.Failures {
			loc := f.File
			if loc == "" {
				loc = f.Package
			}
			row("", fmt.Sprintf("FAIL %s  %s", f.Name, loc))
		}
	}
	row("history", fmt.Sprintf("%d transitions, hash chain verified, head %.16s…", s.Transitions, s.Head))
}

func newTDDModeCmd(a *App) *cobra.Command {
	var session, reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "mode MODE --session S",
		Short: "Switch a session's TDD mode (strict, explore or debug): your decision, audited",
		Long: `Switch a session's TDD mode: strict, explore or debug.

Switching mode is the user's decision only; the agent cannot do it. The
switch is stored in the session's hash-chained journal and printed as the
record the audit log keeps. Leaving debug mode lists the instrumentation
files that are reverted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			to, err := tdd.ParseMode(args[0])
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			if session == "" {
				return fmt.Errorf("%w: --session is required", errUsage)
			}
			ctx := cmd.Context()
			db, j, m, mode, err := a.openTDD(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			sess, err := tdd.Resume(ctx, j, m, session, mode)
			if err != nil {
				return err
			}
			user, _ := a.Getenv("USER")
			tr, err := sess.SwitchMode(ctx, to, tdd.Actor{Kind: tdd.ActorUser, ID: user, Via: "cli"}, reason)
			var te *tdd.Error
			if errors.As(err, &te) && te.Code == tdd.CodeBadEvent {
				return fmt.Errorf("%w: %s", errUsage, te.Reason)
			}
			if err != nil {
				return err
			}
			var reverted []string
			var revertErr error
			if tr.ModeSwitch.From == tdd.Debug || len(tr.Revert) > 0 {
				// Leaving debug mode puts the instrumented files back
				// (and retries any an earlier switch could not).
				reverted, revertErr = sess.RevertInstrumentation(ctx)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					Session    string          `json:"session"`
					ModeSwitch *tdd.ModeSwitch `json:"mode_switch"`
					State      tdd.State       `json:"state"`
					Reverted   []string        `json:"reverted"`
					Head       string          `json:"head"`
				}{session, tr.ModeSwitch, tr.To, nonNil(reverted), sess.Head()}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.Stdout, "session %s: mode %s -> %s (state %s, transition %d)\n", session, tr.ModeSwitch.From, tr.ModeSwitch.To, tr.To, tr.Seq)
				for _, p := range reverted {
					fmt.Fprintf(a.Stdout, "reverted instrumentation: %s\n", termsafe.Line(p))
				}
			}
			if revertErr != nil {
				return fmt.Errorf("mode switched, but some instrumentation files could not be reverted; their originals stay in fluffy.db and leaving debug mode again retries: %w", revertErr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "session id (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept with the switch")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the switch record as JSON")
	return cmd
}

func newTDDParseCmd(a *App) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "parse --format F [FILE]",
		Short: "Parse a test runner's report as the TDD machine sees it (red, green or neither)",
		Long: `Parse a test runner's report as the TDD machine sees it.

Formats: go-json (go test -json), junit-xml (pytest --junitxml, Surefire),
jest-json (jest --json), vitest-json (vitest run --reporter=json),
cargo-text (cargo test 2>&1). Reads FILE, or standard input. Prints the
outcome (passed, failed or no_tests) and the result as JSON; exits 1 when
the report is malformed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := a.Stdin
			if len(args) == 1 {
				// A report a test run left may be anything: never wait
				// on a FIFO or read a device.
				f, err := regfile.Open(args[0], false)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			res, err := testrun.Parse(testrun.Format(format), in)
			if err != nil {
				if !errors.Is(err, testrun.ErrFormat) {
					return fmt.Errorf("%w: %w", errUsage, err)
				}
				return err
			}
			enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Outcome testrun.Outcome `json:"outcome"`
				*testrun.Result
			}{res.Outcome(), res})
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "go-json, junit-xml, jest-json, vitest-json or cargo-text")
	_ = cmd.MarkFlagRequired("format")
	return cmd
}
