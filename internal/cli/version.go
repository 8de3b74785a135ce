package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newVersionCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print fluffy's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := buildinfo.Get()
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(i)
			}
			fmt.Fprintf(a.Stdout, "fluffy %s\ncommit %s\n%s %s\n", i.Version, i.Commit, i.GoVersion, i.Platform)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
