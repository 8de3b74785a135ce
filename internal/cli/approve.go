package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newApprovalsCmd(a *App) *cobra.Command {
	var (
		session string
		asJSON  bool
		ids     bool
		watch   bool
		count   int
	)
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the approval requests waiting for an answer (or watch for new ones)",
		Long: `approvals lists the open approval requests of every session (or --session),
each with its id and its question. Answer one with: fluffy approve ID ANSWER...

With --watch it stays connected and prints each request as it is asked
(this terminal becomes an approval channel) until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.connectKernel(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if watch {
				return a.watchApprovals(ctx, c, session, count)
			}
			var res approval.ListResult
			if err := c.Call(ctx, approval.MethodList, approval.ListParams{Session: session}, &res); err != nil {
				return fmt.Errorf("list approvals: %w", err)
			}
			switch {
			case asJSON:
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			case ids:
				for _, r := range res.Requests {
					fmt.Fprintln(a.Stdout, r.ID)
				}
				return nil
			case len(res.Requests) == 0:
				fmt.Fprintln(a.Stdout, "no pending approvals")
				return nil
			}
			for i, r := range res.Requests {
				if i > 0 {
					fmt.Fprintln(a.Stdout)
				}
				fmt.Fprint(a.Stdout, termsafe.String(r.Prompt))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's requests")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&ids, "ids", false, "print only the request ids")
	cmd.Flags().BoolVar(&watch, "watch", false, "print the open requests, then each one as it is asked, until interrupted")
	cmd.Flags().IntVar(&count, "count", 0, "with --watch, stop after showing this many requests")
	cmd.AddCommand(newApprovalsAskCmd(a))
	return cmd
}

// watchApprovals makes this terminal an approval channel: it prints the
// requests already open, then each one as it is asked (or asked again
// after a partial answer), until interrupted or count requests were shown.
func (a *App) watchApprovals(ctx context.Context, c *ipc.Client, session string, count int) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Watch first, then list: a request asked in between is shown twice
	// at worst (and deduplicated), never missed.
	if err := c.Call(ctx, approval.MethodWatch, nil, nil); err != nil {
		return fmt.Errorf("watch approvals: %w", err)
	}
	var open approval.ListResult
	if err := c.Call(ctx, approval.MethodList, approval.ListParams{Session: session}, &open); err != nil {
		return fmt.Errorf("list approvals: %w", err)
	}
	term := &approval.Terminal{W: termsafe.NewWriter(a.Stdout)}
	fmt.Fprintln(a.Stdout, "watching for approval requests (Ctrl-C to stop)")
	shown := map[string]string{} // id -> last prompt shown
	n := 0
	show := func(v approval.View) error {
		if (session != "" && v.Session != session) || shown[v.ID] == v.Prompt {
			return nil
		}
		shown[v.ID] = v.Prompt
		n++
		return term.Notify(ctx, v.Request)
	}
	for _, v := range open.Requests {
		if err := show(v); err != nil {
			return err
		}
	}
	for count <= 0 || n < count {
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			return fmt.Errorf("the kernel closed the connection: %w", c.Err())
		case ev := <-c.Events():
			if ev.Topic != approval.TopicRequest {
				continue
			}
			var v approval.View
			if err := json.Unmarshal(ev.Data, &v); err != nil {
				return fmt.Errorf("approval event: %w", err)
			}
			if err := show(v); err != nil {
				return err
			}
		}
	}
	return nil
}

func newApprovalsAskCmd(a *App) *cobra.Command {
	var (
		session, summary string
		shells           []string
	)
	cmd := &cobra.Command{
		Use:   "ask --session ID --shell 'CMD' [--shell 'CMD']...",
		Short: "Submit a plan of shell commands for approval and wait for the decisions",
		Long: `ask submits a plan, one step per --shell command line (tool shell.exec, in
the current workspace), to the kernel as a session's request_approval does,
waits until a person answers (fluffy approve) or the request times out, and
prints each step's decision. Exit status 0 when every step was approved, 1
otherwise.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session == "" || len(shells) == 0 {
				return fmt.Errorf("%w: give --session and at least one --shell", errUsage)
			}
			var steps []approval.Step
			for _, s := range shells {
				op, err := a.buildOperation(opSpec{tool: "shell.exec", shell: s})
				if err != nil {
					return err
				}
				op.Session.ID = session
				steps = append(steps, approval.Step{Op: op, Preview: s})
			}
			ctx := cmd.Context()
			c, err := a.connectKernel(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			var req approval.Request
			if err := c.Call(ctx, approval.MethodAsk, approval.AskParams{Session: session, Summary: summary, Steps: steps}, &req); err != nil {
				return fmt.Errorf("ask for approval: %w", err)
			}
			all := true
			for _, it := range req.Items {
				d := string(it.Decision.Verdict)
				if it.Decision.Scope == approval.ScopeSession {
					d += " for session"
				}
				if it.Decision.Reason != "" {
					d += ": " + it.Decision.Reason
				}
				fmt.Fprintf(a.Stdout, "%d. %s\n", it.N, termsafe.Line(d))
				all = all && it.Decision.Verdict == approval.Approved
			}
			if !all {
				return &ExitError{Code: ExitFailure}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "the session asking")
	cmd.Flags().StringVar(&summary, "summary", "", "one line saying what the plan is for")
	cmd.Flags().StringArrayVar(&shells, "shell", nil, "a step: a shell command line (repeatable)")
	return cmd
}

func newApproveCmd(a *App) *cobra.Command {
	var who string
	cmd := &cobra.Command{
		Use:   "approve ID ANSWER...",
		Short: "Answer an approval request by id, from any terminal",
		Long: `approve answers request ID (see fluffy approvals) with the approval answer
language, for example:

  fluffy approve k3x9qa /approve
  fluffy approve k3x9qa /approve 1-3 only
  fluffy approve k3x9qa /approve 2 for session
  fluffy approve k3x9qa /deny 2 too broad

The leading / may be left out (fluffy approve k3x9qa deny 2 too broad).
A malformed answer is explained and changes nothing (exit 2); an unknown or
already answered id exits 1. Steps the answer leaves open are asked again.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			answer := strings.Join(args[1:], " ")
			if !strings.HasPrefix(answer, "/") {
				answer = "/" + answer
			}
			if who == "" {
				who, _ = a.Getenv("USER")
			}
			ctx := cmd.Context()
			c, err := a.connectKernel(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			var res approval.AnswerResult
			err = c.Call(ctx, approval.MethodAnswer, approval.AnswerParams{ID: args[0], Answer: answer, Who: who}, &res)
			var ie *ipc.Error
			switch {
			case errors.As(err, &ie) && ie.Code == approval.CodeUnknownRequest:
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("no open approval request %q (fluffy approvals lists them)", args[0])}
			case errors.As(err, &ie) && (ie.Code == approval.CodeBadAnswer || ie.Code == ipc.CodeInvalidParams):
				return &ExitError{Code: ExitUsage, Msg: ie.Message}
			case err != nil:
				return fmt.Errorf("answer approval %s: %w", args[0], err)
			}
			if res.Open {
				fmt.Fprintf(a.Stdout, "answer recorded; request %s still has open steps:\n\n%s", res.ID, termsafe.String(res.Prompt))
				return nil
			}
			fmt.Fprintf(a.Stdout, "answer recorded; request %s is decided\n", res.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&who, "who", "", "who is answering, for the audit log (default $USER)")
	return cmd
}
