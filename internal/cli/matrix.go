package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/channel/matrix"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newMatrixCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Operate the assistant daemon's Matrix channel",
		Long: `matrix operates the Matrix channel of the running 'fluffy serve'
(serve.matrix). See docs/channels.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newMatrixVerifyCmd(a))
	return cmd
}

func newMatrixVerifyCmd(a *App) *cobra.Command {
	var confirm, cancel, asJSON bool
	cmd := &cobra.Command{
		Use:   "verify [ID --confirm|--cancel]",
		Short: "List the verifications of the bot's device people started, and confirm or cancel one",
		Long: `verify lists the emoji verifications (SAS) of the bot's device that a
principal started from their Matrix client, with the emoji and numbers
the bot sees. Compare them with what the person's client shows: when
every emoji matches, 'fluffy matrix verify ID --confirm' makes the bot
trust the person's device (and the master key the verification covered)
and the person's client shows the bot as verified; otherwise --cancel.
The bot never confirms on its own; an unanswered verification is
cancelled after 5 minutes. See docs/channels.md.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			switch {
			case confirm && cancel:
				return &ExitError{Code: ExitUsage, Msg: "--confirm and --cancel exclude each other"}
			case len(args) == 1 && !confirm && !cancel:
				return &ExitError{Code: ExitUsage, Msg: "say --confirm (the emoji match) or --cancel (they do not)"}
			case len(args) == 0 && (confirm || cancel):
				return &ExitError{Code: ExitUsage, Msg: "--confirm and --cancel need the verification's ID (fluffy matrix verify lists them)"}
			}
			cl, err := a.dialRunning(ctx)
			if err != nil {
				return err
			}
			if cl == nil {
				return &ExitError{Code: ExitFailure, Msg: "no daemon is running: verifications reach the bot through 'fluffy serve'; start it first"}
			}
			defer cl.Close()
			if len(args) == 0 {
				var list matrix.VerifyList
				if err := matrixCall(cl.Call(ctx, matrix.VerifyListMethod, nil, &list)); err != nil {
					return err
				}
				if asJSON {
					return printMatrixJSON(a.Stdout, list)
				}
				printVerifications(a.Stdout, list.Verifications, time.Now())
				return nil
			}
			var ans matrix.VerifyAnswer
			if err := matrixCall(cl.Call(ctx, matrix.VerifyAnswerMethod, matrix.VerifyAnswerParams{ID: args[0], Confirm: confirm}, &ans)); err != nil {
				return err
			}
			if asJSON {
				return printMatrixJSON(a.Stdout, ans)
			}
			return printVerifyAnswer(a.Stdout, ans, cancel)
		},
	}
	cmd.Flags().BoolVar(&confirm, "confirm", false, "the emoji match what the person's client shows: trust the person's device")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "the emoji do not match (or you do not know this verification): cancel it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// matrixCall turns the daemon's refusals into messages.
func matrixCall(err error) error {
	var ie *ipc.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ipc.ErrUnknownMethod):
		return &ExitError{Code: ExitFailure, Msg: "the running kernel serves no Matrix channel: start 'fluffy serve' with serve.matrix configured"}
	case errors.As(err, &ie) && (ie.Code == matrix.CodeUnknownVerification || ie.Code == matrix.CodeNotComparable):
		return &ExitError{Code: ExitFailure, Msg: "the daemon: " + ie.Message}
	}
	return fmt.Errorf("matrix verify: %w", err)
}

func printMatrixJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printVerifications(w io.Writer, vs []matrix.PendingVerification, now time.Time) {
	if len(vs) == 0 {
		fmt.Fprintln(w, "no verification is pending (start one from your Matrix client: verify the bot's session)")
		return
	}
	for i, v := range vs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  %s, device %s (channel %s), started %s ago\n", termsafe.String(v.ID), termsafe.String(v.Principal),
			termsafe.String(v.Device), termsafe.String(v.Channel), now.Sub(v.Started).Round(time.Second))
		if v.State != matrix.StateCompare {
			fmt.Fprintf(w, "  %s: no emoji yet; choose \"verify by emoji\" in the person's client\n", v.State)
			continue
		}
		fmt.Fprintf(w, "  emoji:   %s\n", termsafe.String(strings.Join(v.Emoji, "  ")))
		if len(v.Decimals) == 3 {
			fmt.Fprintf(w, "  numbers: %d %d %d\n", v.Decimals[0], v.Decimals[1], v.Decimals[2])
		}
		if v.PinnedKey != "" {
			fmt.Fprintf(w, "  master key %s differs from the pinned one (%s): confirming re-pins %s to it\n",
				termsafe.String(v.MasterKey), termsafe.String(v.PinnedKey), termsafe.String(v.Principal))
		}
		fmt.Fprintf(w, "  the same emoji in the same order on the person's screen? fluffy matrix verify %s --confirm (else --cancel); expires in %s\n",
			termsafe.String(v.ID), max(v.Expires.Sub(now), 0).Round(time.Second))
	}
}

// printVerifyAnswer says how the verification ended; asked: the
// operator cancelled it.
func printVerifyAnswer(w io.Writer, a matrix.VerifyAnswer, asked bool) error {
	who := fmt.Sprintf("%s's device %s", termsafe.String(a.Principal), termsafe.String(a.Device))
	switch a.Outcome {
	case matrix.OutcomeVerified:
		fmt.Fprintf(w, "verified: the bot trusts %s, and the person's client shows the bot as verified\n", who)
		if a.Repinned {
			fmt.Fprintf(w, "master key %s is now pinned for %s in place of %s: your confirmation re-pinned it\n",
				termsafe.String(a.MasterKey), termsafe.String(a.Principal), termsafe.String(a.PinnedKey))
		}
		return nil
	case matrix.OutcomePending:
		fmt.Fprintf(w, "confirmed; %s has not finished yet: the audit log records the end (channel.verify)\n", who)
		return nil
	}
	msg := fmt.Sprintf("cancelled: the bot does not trust %s", who)
	if a.Reason != "" {
		msg += " (" + termsafe.String(a.Reason) + ")"
	}
	fmt.Fprintln(w, msg)
	if asked {
		return nil
	}
	return &ExitError{Code: ExitFailure, Msg: "the verification did not finish"}
}
