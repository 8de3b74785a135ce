package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

type shownProvider struct {
	Name       string   `json:"name"`
	About      string   `json:"about"`
	KeyEnv     []string `json:"key_env,omitempty"`
	Key        string   `json:"key"` // "set (VAR)", "not set", "not needed", "optional, not set"
	BaseURL    string   `json:"base_url,omitempty"`
	BaseURLEnv string   `json:"base_url_env,omitempty"`
}

func newModelsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List model providers, their environment variables, and whether a key is set",
		Long: `Models are named provider/name, e.g. anthropic/claude-sonnet-4-5,
openai/gpt-5, gemini/gemini-2.5-pro, ollama/qwen3 or replay/demo.

This command shows, for each provider, the variables fluffy reads its key
and address from, and whether a key is configured. It never prints a key.
See docs/models.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			opts := catalog.Options{Env: a.Getenv, BaseURLs: l.Config.LLM.BaseURLs}
			var rows []shownProvider
			for _, p := range catalog.Providers() {
				r := shownProvider{Name: p.Name, About: p.About, KeyEnv: p.KeyEnv, BaseURL: p.Address(opts), BaseURLEnv: p.BaseURLEnv}
				_, from := p.Key(a.Getenv)
				switch {
				case p.NoKey:
					r.Key = "not needed"
				case from != "":
					r.Key = "set (" + from + ")"
				case p.KeyOptional:
					r.Key = "optional, not set"
				default:
					r.Key = "not set"
				}
				rows = append(rows, r)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"default": l.Config.Model, "providers": rows, "prices": l.Config.LLM.Prices})
			}
			fmt.Fprintf(a.Stdout, "default model: %s\n\n", l.Config.Model)
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROVIDER\tKEY\tKEY VARIABLES\tBASE URL\tBASE URL VARIABLE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Key, dash(strings.Join(r.KeyEnv, ", ")), dash(r.BaseURL), dash(r.BaseURLEnv))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, "\nPrices (US$ per million tokens; llm.prices):")
			tw = tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE")
			names := make([]string, 0, len(l.Config.LLM.Prices))
			for n := range l.Config.LLM.Prices {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				p := l.Config.LLM.Prices[n]
				fmt.Fprintf(tw, "%s\t%g\t%g\t%g\t%g\n", n, p.Input, p.Output, p.CacheRead, p.CacheWrite)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newModelsTryCmd(a))
	return cmd
}

func newModelsTryCmd(a *App) *cobra.Command {
	var maxTokens int
	cmd := &cobra.Command{
		Use:   "try MODEL [PROMPT]",
		Short: "Send one prompt (no tools) to a model and stream its answer",
		Long: `Checks that a provider is reachable and its key works: sends PROMPT
(default "Say hello.") without tools, streams the answer to stdout, and
reports the stop reason, usage and cost on stderr. Retries as every model
call does.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			prompt := "Say hello."
			if len(args) == 2 {
				prompt = args[1]
			}
			p, name, err := catalog.Open(cmd.Context(), args[0], catalog.Options{
				Env: a.Getenv, BaseURLs: l.Config.LLM.BaseURLs,
				Retry: llm.RetryOptions{Attempts: l.Config.LLM.RetryAttempts, MaxElapsed: l.Config.LLM.RetryBudget.Std(), Logger: a.Logger()},
			})
			if err != nil {
				if errors.Is(err, catalog.ErrModel) {
					return fmt.Errorf("%w: %w", errUsage, err)
				}
				return err
			}
			req := llm.Request{Model: name, MaxTokens: maxTokens, Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text(prompt)}}}}
			resp, err := llm.Collect(p.Stream(cmd.Context(), req), func(ev llm.Event) {
				if ev.Type == llm.EventText {
					fmt.Fprint(a.Stdout, termsafe.String(ev.Text))
				}
			})
			fmt.Fprintln(a.Stdout)
			if err != nil {
				return err
			}
			price := l.Config.LLM.Prices[args[0]]
			cost := llm.Price{Input: price.Input, Output: price.Output, CacheRead: price.CacheRead, CacheWrite: price.CacheWrite}.Cost(resp.Usage)
			fmt.Fprintf(a.Stderr, "stop: %s; tokens: %d in, %d out, %d cache read, %d cache write; cost: $%.6f\n",
				resp.Stop, resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.Usage.CacheReadTokens, resp.Usage.CacheWriteTokens, cost)
			return nil
		},
	}
	cmd.Flags().IntVar(&maxTokens, "max-tokens", 512, "bound the answer")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
