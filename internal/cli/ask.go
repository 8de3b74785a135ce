package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel/terminal"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newAskCmd(a *App) *cobra.Command {
	var (
		thread string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ask MESSAGE...",
		Short: "Talk to the assistant through the running daemon (fluffy serve)",
		Long: `ask hands MESSAGE to the assistant of the running 'fluffy serve', in the
conversation named by --thread (default "main": one session per thread),
and prints its reply when the turn ends. The session's approval requests
are shown here as they are asked; answer each on a line in the approval
language (/approve, /approve 1 for session, /deny REASON), or from another
terminal with 'fluffy approve'. The daemon's terminal channel trusts the
message: the kernel socket admits only your own user.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cl, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if cl == nil {
				return &ExitError{Code: ExitFailure, Msg: "no daemon is running: 'fluffy ask' talks to 'fluffy serve'; start it first"}
			}
			defer cl.Close()
			res, err := a.ask(ctx, cl, terminal.SayParams{Text: strings.Join(args, " "), Thread: thread})
			var ie *ipc.Error
			switch {
			case errors.Is(err, ipc.ErrUnknownMethod):
				return &ExitError{Code: ExitFailure, Msg: "the running kernel is not 'fluffy serve' (it has no assistant); start 'fluffy serve'"}
			case errors.As(err, &ie) && ie.Code == terminal.CodeNotServing:
				return &ExitError{Code: ExitFailure, Msg: "the daemon: " + ie.Message}
			case errors.Is(err, context.Canceled) && res.Session != "":
				fmt.Fprintf(a.Stderr, "stopped waiting; the turn goes on in session %s (fluffy session show %s)\n", res.Session, res.Session)
				return &ExitError{Code: ExitFailure}
			case err != nil:
				return fmt.Errorf("ask: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			if res.Text != "" {
				fmt.Fprintln(a.Stdout, termsafe.String(strings.TrimRight(res.Text, "\n")))
			} else {
				fmt.Fprintf(a.Stdout, "(no reply: the turn ended %s %s)\n", termsafe.Line(res.Status), termsafe.Line(res.Reason))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&thread, "thread", "", `the conversation (default "main"); each thread is one session`)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// ask sends p through the daemon's terminal channel and waits for the
// turn's end, showing the session's approval requests meanwhile and
// answering each with a line read from the input.
func (a *App) ask(ctx context.Context, cl *ipc.Client, p terminal.SayParams) (terminal.SayResult, error) {
	// Watch before saying: a request asked before the session's id is
	// known is listed once it is.
	if err := cl.Call(ctx, approval.MethodWatch, nil, nil); err != nil {
		return terminal.SayResult{}, fmt.Errorf("watch approvals: %w", err)
	}
	type said struct {
		res terminal.SayResult
		err error
	}
	done := make(chan said, 1)
	go func() {
		var res terminal.SayResult
		err := cl.Call(ctx, terminal.MethodSay, p, &res)
		done <- said{res, err}
	}()
	lines := make(chan string)
	go readLines(a.Stdin, lines)
	term := &approval.Terminal{W: termsafe.NewWriter(a.Stderr)}
	session := ""
	shown := map[string]string{}
	var open []approval.View // shown, not yet answered, oldest first
	var pending []string     // answers typed before their question
	answer := func() {
		for len(open) > 0 && len(pending) > 0 {
			v, line := open[0], pending[0]
			pending = pending[1:]
			var r approval.AnswerResult
			err := cl.Call(ctx, approval.MethodAnswer, approval.AnswerParams{ID: v.ID, Answer: line, Who: "terminal"}, &r)
			var ie *ipc.Error
			switch {
			case errors.As(err, &ie) && ie.Code == approval.CodeUnknownRequest:
				fmt.Fprintf(a.Stderr, "request %s was already answered\n", v.ID)
				open = open[1:]
			case err != nil:
				fmt.Fprintf(a.Stderr, "%s\n", termsafe.Line(err.Error()))
			case !r.Open:
				open = open[1:]
			}
		}
	}
	show := func(v approval.View) error {
		if v.Session != session || shown[v.ID] == v.Prompt {
			return nil
		}
		shown[v.ID] = v.Prompt
		open = append(open, v)
		if err := term.Notify(ctx, v.Request); err != nil {
			return err
		}
		answer()
		return nil
	}
	for {
		select {
		case d := <-done:
			if session != "" && d.res.Session == "" {
				d.res.Session = session
			}
			return d.res, d.err
		case <-cl.Done():
			return terminal.SayResult{Session: session}, fmt.Errorf("the daemon closed the connection: %w", cl.Err())
		case ev := <-cl.Events():
			switch ev.Topic {
			case terminal.TopicSession:
				var s terminal.SessionEvent
				if err := json.Unmarshal(ev.Data, &s); err != nil {
					return terminal.SayResult{}, fmt.Errorf("session event: %w", err)
				}
				session = s.Session
				var l approval.ListResult
				if err := cl.Call(ctx, approval.MethodList, approval.ListParams{Session: session}, &l); err != nil {
					return terminal.SayResult{Session: session}, fmt.Errorf("list approvals: %w", err)
				}
				for _, v := range l.Requests {
					if err := show(v); err != nil {
						return terminal.SayResult{Session: session}, err
					}
				}
			case approval.TopicRequest:
				var v approval.View
				if err := json.Unmarshal(ev.Data, &v); err != nil {
					return terminal.SayResult{Session: session}, fmt.Errorf("approval event: %w", err)
				}
				if err := show(v); err != nil {
					return terminal.SayResult{Session: session}, err
				}
			}
		case line, ok := <-lines:
			if !ok {
				lines = nil // end of input: answers come from 'fluffy approve'
				continue
			}
			if strings.TrimSpace(line) == "" {
				continue
			}
			pending = append(pending, line)
			answer()
		}
	}
}

// readLines sends r's lines to out until its end, then closes out.
func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	if r == nil {
		return
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out <- sc.Text()
	}
}
