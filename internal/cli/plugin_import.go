package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// clientConfigs are where MCP clients keep their servers, for an import
// without a FILE: the user's own, then the workspace's.
func (a *App) clientConfigs() []string {
	home, _ := a.user().Getenv("HOME")
	ws := a.user().Workspace()
	codex := filepath.Join(home, ".codex")
	if d, ok := a.user().Getenv("CODEX_HOME"); ok && filepath.IsAbs(d) {
		codex = d
	}
	var out []string
	if home != "" {
		out = append(out,
			filepath.Join(home, ".config", "Claude", "claude_desktop_config.json"),
			filepath.Join(home, ".claude.json"),
			filepath.Join(home, ".cursor", "mcp.json"),
			filepath.Join(codex, "config.toml"))
	}
	return append(out, filepath.Join(ws, ".mcp.json"), filepath.Join(ws, ".cursor", "mcp.json"))
}

func newPluginImportCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "import [FILE]",
		Short: "Turn the MCP servers of Claude, Cursor or Codex configurations into disabled plugins to review",
		Long: `import reads the "mcpServers" of Claude Desktop (claude_desktop_config.json),
Claude Code (.mcp.json, ~/.claude.json) and Cursor (.cursor/mcp.json), or the
[mcp_servers.NAME] tables of Codex (~/.codex/config.toml); without FILE, every
one of those that exists. Each server that is a command becomes a plugin with
a generated manifest in <data>/plugins/NAME/src/fluffy-plugin.yaml, recorded
disabled: review the manifest (network, capabilities), then 'fluffy plugin
enable NAME'. An environment value that looks like a secret is never copied:
it becomes a secret reference to fill with 'fluffy secret set'. Servers
reached by URL, and names already taken, are skipped.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			files := a.clientConfigs()
			if len(args) == 1 {
				files = []string{a.user().Abs(args[0])}
			}
			p, err := a.openPlugins(ctx)
			if err != nil {
				return err
			}
			defer p.Close()
			found, added := 0, 0
			for _, f := range files {
				data, err := os.ReadFile(f)
				if len(args) == 0 && errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return fmt.Errorf("%w: %v", errUsage, err)
				}
				found++
				ims, err := plugin.ParseClientConfig(data, f)
				if err != nil {
					return fmt.Errorf("%w: %v", errUsage, err)
				}
				fmt.Fprintf(a.Stdout, "%s:\n", termsafe.Line(f))
				for _, im := range ims {
					ok, err := importOne(ctx, a, p, f, im)
					if err != nil {
						return err
					}
					if ok {
						added++
					}
				}
			}
			if found == 0 {
				return &ExitError{Code: ExitFailure, Msg: "no MCP client configuration found (give FILE)"}
			}
			fmt.Fprintf(a.Stdout, "%d plugin(s) imported, all disabled: review each manifest, then 'fluffy plugin enable NAME'\n", added)
			return nil
		},
	}
}

// importOne writes one imported server's manifest and records it
// disabled; false when it was skipped.
func importOne(ctx context.Context, a *App, p *pluginEnv, file string, im plugin.Imported) (bool, error) {
	line := termsafe.Line
	if im.Skipped != "" {
		fmt.Fprintf(a.Stdout, "  %s: skipped: %s\n", line(im.Server), line(im.Skipped))
		return false, nil
	}
	name := im.Manifest.Name
	if _, err := p.ps.Get(ctx, name); err == nil {
		fmt.Fprintf(a.Stdout, "  %s: skipped: a plugin %s exists\n", line(im.Server), name)
		return false, nil
	} else if !errors.Is(err, plugin.ErrNotFound) {
		return false, err
	}
	folder := plugin.Folder(p.data, name)
	src := filepath.Join(folder, plugin.ImportedDir)
	// Left over from a plugin removed by hand: what was there is not
	// what the person will review.
	if err := os.RemoveAll(src); err != nil {
		return false, err
	}
	if err := os.MkdirAll(src, 0o700); err != nil {
		return false, err
	}
	mf := filepath.Join(src, plugin.ManifestName)
	if err := os.WriteFile(mf, im.YAML, 0o600); err != nil {
		return false, err
	}
	digest, err := plugin.Digest(src)
	if err != nil {
		return false, err
	}
	reason := "imported: review " + mf + ", then enable"
	rec := plugin.Record{Manifest: im.Manifest, Dir: src, Digest: digest, State: plugin.Disabled, Reason: reason, Source: file}
	if err := p.ps.Add(ctx, rec); err != nil {
		return false, err
	}
	if err := recordPlugin(ctx, a, audit.PluginInstall{Plugin: name, Version: im.Manifest.Version, Dir: src, Digest: digest,
		State: string(plugin.Disabled), Source: file, Capabilities: capNames(im.Manifest)}); err != nil {
		return false, err
	}
	fmt.Fprintf(a.Stdout, "  %s: plugin %s (disabled), manifest %s\n", line(im.Server), name, line(mf))
	for _, n := range im.Notes {
		fmt.Fprintf(a.Stdout, "    note: %s\n", line(n))
	}
	return true, nil
}
