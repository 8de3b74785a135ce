package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newConfigCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show, locate and validate configuration",
		Long: `fluffy's configuration is built from, lowest precedence first:

  built-in defaults
  the user file      $XDG_CONFIG_HOME/fluffy/config.yaml
  the project file   <repo>/.fluffy/config.yaml
  the environment    FLUFFY_<KEY>, e.g. FLUFFY_SANDBOX_RUNTIME=docker
  flags              --set key=value, --home DIR

A project file cannot set keys that loosen protections (marked "user only"
in 'fluffy config show'). See docs/configuration.md.`,
	}
	cmd.AddCommand(newConfigShowCmd(a), newConfigValidateCmd(a), newConfigPathCmd(a))
	return cmd
}

type shownKey struct {
	Key    string        `json:"key"`
	Value  any           `json:"value"`
	Origin config.Origin `json:"origin"`
	Env    string        `json:"env"`
	Type   string        `json:"type"`
	User   bool          `json:"user_only,omitempty"`
}

func newConfigShowCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration and where each value came from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			var rows []shownKey
			for _, k := range config.Keys() {
				rows = append(rows, shownKey{Key: k.Name, Value: valueOf(&l.Config, k.Name), Origin: l.Origins[k.Name], Env: k.Env, Type: k.Type, User: k.UserOnly})
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tVALUE\tFROM")
			for _, r := range rows {
				key := r.Key
				if r.User {
					key += " (user only)"
				}
				// A project's configuration is the repository's text.
				fmt.Fprintf(tw, "%s\t%s\t%s\n", key, termsafe.Line(fmt.Sprint(format(r.Value))), termsafe.Line(fmt.Sprint(r.Origin)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// valueOf reads a dotted key out of the config by its yaml tags.
func valueOf(c *config.Config, key string) any {
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(key, ".") {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name == part {
				v = v.Field(i)
				break
			}
		}
	}
	return v.Interface()
}

func format(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	if s, ok := v.(string); ok && s == "" {
		return `""`
	}
	return fmt.Sprint(v)
}

func newConfigValidateCmd(a *App) *cobra.Command {
	var project bool
	cmd := &cobra.Command{
		Use:   "validate [FILE]",
		Short: "Check the effective configuration, or one file",
		Long: `Without FILE, loads the whole hierarchy (user file, project file,
environment, flags) and reports every problem. With FILE, checks that file on
its own, as a user file (or as a project file with --project).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				layer := config.LayerUser
				if project {
					layer = config.LayerProject
				}
				if err := config.ValidateFile(args[0], layer, a.Getenv); err != nil {
					return fmt.Errorf("%w: %w", errUsage, err)
				}
				fmt.Fprintf(a.Stdout, "%s: valid\n", args[0])
				return nil
			}
			l, err := a.Config()
			if err != nil {
				return err
			}
			if len(l.Files) == 0 {
				fmt.Fprintln(a.Stdout, "no configuration files; built-in defaults, environment and flags are valid")
				return nil
			}
			for _, f := range l.Files {
				fmt.Fprintf(a.Stdout, "%s: valid\n", f)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&project, "project", false, "check FILE as a project file (user-only keys refused)")
	return cmd
}

func newConfigPathCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "path",
		Short: "Print where fluffy looks for configuration and keeps its data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := a.user().LoadOptions()
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			exists := func(p string) string {
				if p == "" {
					return "(not in a project)"
				}
				for _, f := range []string{opts.UserFile, opts.ProjectFile} {
					if f == p && fileExists(p) {
						return p
					}
				}
				return p + " (absent)"
			}
			fmt.Fprintf(tw, "user config\t%s\n", exists(opts.UserFile))
			fmt.Fprintf(tw, "project config\t%s\n", exists(opts.ProjectFile))
			if l, err := a.Config(); err == nil {
				fmt.Fprintf(tw, "data directory\t%s\n", l.Config.Home)
			} else {
				fmt.Fprintf(tw, "data directory\t(configuration invalid: run 'fluffy config validate')\n")
			}
			return tw.Flush()
		},
	}
}
