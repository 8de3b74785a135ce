package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newPluginTestCmd(a *App) *cobra.Command {
	var workspace string
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Start a plugin from its folder in its sandbox, list its tools and run its tests/*.json cases",
		Long: `Test starts the plugin in DIR (default: the current directory), installed or
not, in its sandbox as a session would run it, checks its manifest, lists
the tools its server answers to tools/list (name, description, input schema,
annotations), and runs each case of DIR/tests/*.json: a tool call and a
regular expression its result must match (docs/plugins.md). The workspace
(--workspace, default the current directory) is read-only to it; with
write-changeset its writes go to a change set thrown away afterwards.
It fails when the server does not answer or a case fails.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			dir = a.abs(dir)
			ws := a.abs(workspace)
			rep, err := a.Core.TestPlugin(cmd.Context(), a.user(), dir, ws)
			if err != nil {
				return err
			}
			printTrial(a.Stdout, rep)
			if rep.Err != nil {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("plugin %s: %v", rep.Manifest.Name, rep.Err)}
			}
			if !rep.Passed() {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("plugin %s: a test failed", rep.Manifest.Name)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", ".", "the workspace the plugin gets (read-only; with write-changeset an overlay thrown away)")
	return cmd
}

// printTrial shows the plugin, its tools and its cases' outcomes; what the
// server sent is untrusted and shown through termsafe.
func printTrial(w io.Writer, rep plugin.TestReport) {
	line := termsafe.Line
	m := rep.Manifest
	fmt.Fprintf(w, "plugin %s %s (runtime %s)\n", line(m.Name), line(m.Version), line(rep.Runtime))
	printManifest(w, m)
	fmt.Fprintf(w, "tools: %d\n", len(rep.Tools))
	for _, t := range rep.Tools {
		fmt.Fprintf(w, "  %s\n", line(t.Name))
		fmt.Fprintf(w, "    description: %s\n", line(t.Description))
		fmt.Fprintf(w, "    schema:      %s\n", line(t.Schema))
		if len(t.Annotations) > 0 {
			keys := make([]string, 0, len(t.Annotations))
			for k, v := range t.Annotations {
				keys = append(keys, fmt.Sprintf("%s=%v", k, v))
			}
			sort.Strings(keys)
			fmt.Fprintf(w, "    annotations: %s\n", line(strings.Join(keys, " ")))
		}
	}
	for _, r := range rep.Refused {
		fmt.Fprintf(w, "  refused %s\n", line(r))
	}
	if len(rep.Results) == 0 && rep.Err == nil {
		fmt.Fprintf(w, "tests: none (%s/*.json)\n", plugin.TestsDir)
		return
	}
	pass := 0
	for _, r := range rep.Results {
		if r.Pass {
			pass++
			fmt.Fprintf(w, "PASS %s\n", line(r.Case.Name))
			continue
		}
		fmt.Fprintf(w, "FAIL %s: %s\n", line(r.Case.Name), line(r.Why))
		if r.Output != "" {
			out, _ := json.Marshal(r.Output)
			fmt.Fprintf(w, "  result: %s\n", line(clip(string(out), 400)))
		}
	}
	if len(rep.Results) > 0 {
		fmt.Fprintf(w, "tests: %d passed, %d failed\n", pass, len(rep.Results)-pass)
	}
}

// clip cuts s to n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
