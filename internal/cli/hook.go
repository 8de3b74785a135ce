package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/channel/webhook"
	"github.com/fluffy-agent/fluffy/internal/config"
)

func newHookCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Help with the assistant daemon's webhooks (serve.webhooks)",
	}
	cmd.AddCommand(newHookSignCmd(a))
	return cmd
}

func newHookSignCmd(a *App) *cobra.Command {
	var body, delivery, event string
	cmd := &cobra.Command{
		Use:   "sign NAME --body FILE",
		Short: "Print the headers of a validly signed delivery to a hook, for testing a setup",
		Long: `Sign FILE (- for standard input) as the hook NAME of serve.webhooks
expects, with its secret, and print the request's headers, one a line, for
curl's -H @file:

  fluffy hook sign deploy --body payload.json > headers
  curl --data-binary @payload.json -H @headers http://127.0.0.1:8080/hooks/deploy

The fluffy form signs the current time: send it within the hook's window.
Each run makes a new delivery id unless --delivery sets one (the same id
twice is refused as a replay). See docs/webhooks.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			hook, ok := findHook(l.Config.Serve.Webhooks, args[0])
			if !ok {
				return fmt.Errorf("%w: no webhook %q in serve.webhooks", errUsage, args[0])
			}
			payload, err := readHookBody(a, body)
			if err != nil {
				return err
			}
			secret, err := webhook.ResolveSecret(hook.Secret, a.Getenv)
			if err != nil {
				return fmt.Errorf("hook %s: %w", hook.Name, err)
			}
			if delivery == "" {
				var b [16]byte
				rand.Read(b[:])
				delivery = hex.EncodeToString(b[:])
			}
			out := a.Stdout
			fmt.Fprintln(out, "Content-Type: application/json")
			switch hook.Signature {
			case webhook.SchemeGitHub:
				printHeader(out, webhook.HeaderGitHubSignature, webhook.SignGitHub(secret, payload))
				printHeader(out, webhook.HeaderGitHubDelivery, delivery)
				printHeader(out, webhook.HeaderGitHubEvent, event)
			case webhook.SchemeFluffy:
				printHeader(out, webhook.HeaderFluffySignature, webhook.SignFluffy(secret, payload, time.Now()))
				printHeader(out, webhook.HeaderFluffyDelivery, delivery)
				printHeader(out, webhook.HeaderFluffyEvent, event)
			default:
				return fmt.Errorf("%w: hook %s: signature %q is neither github nor fluffy", errUsage, hook.Name, hook.Signature)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&body, "body", "", "the payload to sign: a file, or - for standard input (required)")
	cmd.Flags().StringVar(&delivery, "delivery", "", "the delivery id (default: a new random one)")
	cmd.Flags().StringVar(&event, "event", "", "the event name to send (optional)")
	cmd.MarkFlagRequired("body")
	return cmd
}

func findHook(hooks []config.Webhook, name string) (config.Webhook, bool) {
	for _, h := range hooks {
		if h.Name == name {
			return h, true
		}
	}
	return config.Webhook{}, false
}

func readHookBody(a *App, path string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(a.Stdin, webhook.MaxMaxBody+1))
	} else {
		b, err = os.ReadFile(a.abs(path))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --body: %w", errUsage, err)
	}
	if len(b) > webhook.MaxMaxBody {
		return nil, fmt.Errorf("%w: --body: longer than any hook accepts (%d bytes)", errUsage, webhook.MaxMaxBody)
	}
	return b, nil
}

func printHeader(w io.Writer, name, value string) {
	if value != "" {
		fmt.Fprintf(w, "%s: %s\n", name, value)
	}
}
