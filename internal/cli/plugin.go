package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newPluginCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Install, enable and inspect plugins: MCP servers fluffy runs in its sandbox (docs/plugins.md)",
	}
	cmd.AddCommand(newPluginLsCmd(a), newPluginInspectCmd(a), newPluginInstallCmd(a), newPluginEnableCmd(a),
		newPluginDisableCmd(a), newPluginRmCmd(a), newPluginLogsCmd(a), newPluginApproveToolsCmd(a),
		newPluginImportCmd(a), newPluginDigestCmd(a), newPluginTestCmd(a))
	return cmd
}

// pluginEnv is what a plugin command works on: fluffy.db's plugins and
// the data directory.
type pluginEnv struct {
	db   *store.DB
	ps   *plugin.DB
	data string
}

func (a *App) openPlugins(ctx context.Context) (*pluginEnv, error) {
	d, err := a.DataDir()
	if err != nil {
		return nil, err
	}
	if err := d.Ensure(); err != nil {
		return nil, err
	}
	db, err := store.OpenMain(ctx, d.Root)
	if err != nil {
		return nil, fmt.Errorf("open fluffy.db: %w", err)
	}
	return &pluginEnv{db: db, ps: &plugin.DB{SQL: db.DB}, data: d.Root}, nil
}

func (p *pluginEnv) Close() error { return p.db.Close() }

// openPlugin opens the plugin store and reads one plugin's record; the
// caller closes the store.
func (a *App) openPlugin(ctx context.Context, name string) (*pluginEnv, plugin.Record, error) {
	p, err := a.openPlugins(ctx)
	if err != nil {
		return nil, plugin.Record{}, err
	}
	r, err := p.get(ctx, name)
	if err != nil {
		p.Close()
		return nil, plugin.Record{}, err
	}
	return p, r, nil
}

// get is a plugin by name; an unknown one is a failure naming it.
func (p *pluginEnv) get(ctx context.Context, name string) (plugin.Record, error) {
	r, err := p.ps.Get(ctx, name)
	if errors.Is(err, plugin.ErrNotFound) {
		return r, &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("no plugin %q ('fluffy plugin ls' lists them)", name)}
	}
	return r, err
}

// recordPlugin appends one plugin.* entry, actor user.
func recordPlugin(ctx context.Context, a *App, p audit.Payload) error {
	l, err := openAuditLog(ctx, a)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if _, err := l.Append(ctx, audit.Entry{Kind: p.Kind(), Actor: audit.ActorUser, Payload: p}); err != nil {
		l.Close()
		return err
	}
	return l.Close()
}

func newPluginLsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the plugins with their states",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			p, err := a.openPlugins(ctx)
			if err != nil {
				return err
			}
			defer p.Close()
			rs, err := p.ps.List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Name    string       `json:"name"`
					Version string       `json:"version"`
					State   plugin.State `json:"state"`
					Reason  string       `json:"reason"`
					Digest  string       `json:"digest"`
					Signer  string       `json:"signer,omitempty"`
					Dir     string       `json:"dir"`
				}
				out := []row{}
				for _, r := range rs {
					out = append(out, row{r.Manifest.Name, r.Manifest.Version, r.State, r.Reason, r.Digest, r.Signer, r.Dir})
				}
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if len(rs) == 0 {
				fmt.Fprintln(a.Stdout, "no plugins ('fluffy plugin install PATH' or 'fluffy plugin import' adds one)")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tSTATE\tDIGEST\tREASON")
			for _, r := range rs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Manifest.Name, termsafe.Line(r.Manifest.Version), r.State, shortDigest(r.Digest), termsafe.Line(r.Reason))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func shortDigest(d string) string {
	if len(d) > 7+12 {
		return d[:7+12]
	}
	return d
}

func newPluginInspectCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a plugin: its manifest, identity, state, pinned tools and changes waiting for approval",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			line, w := termsafe.Line, a.Stdout
			m := r.Manifest
			fmt.Fprintf(w, "plugin %s %s\n", m.Name, line(m.Version))
			fmt.Fprintf(w, "  state:   %s (%s)\n", r.State, line(r.Reason))
			fmt.Fprintf(w, "  folder:  %s\n", line(r.Dir))
			fmt.Fprintf(w, "  digest:  %s\n", r.Digest)
			if now, err := plugin.Digest(r.Dir); err != nil {
				fmt.Fprintf(w, "  files:   cannot be read: %s\n", line(err.Error()))
			} else if now != r.Digest {
				fmt.Fprintf(w, "  files:   changed since approval (now %s): 'fluffy plugin enable %s' shows and approves them\n", now, m.Name)
			}
			signer := "unsigned"
			if r.Signer != "" {
				signer = "signed by " + line(r.Signer)
			}
			fmt.Fprintf(w, "  signer:  %s\n", signer)
			if r.Source != "" && r.Source != r.Dir {
				fmt.Fprintf(w, "  source:  %s\n", line(r.Source))
			}
			fmt.Fprintf(w, "  log:     %s\n", filepath.Join(plugin.Folder(p.data, m.Name), plugin.LogName))
			printManifest(w, m)
			pins, err := p.ps.Pins(ctx, m.Name)
			if err != nil {
				return err
			}
			if len(pins) == 0 {
				fmt.Fprintln(w, "tools: none pinned yet (pinned at the first start after enable)")
			} else {
				fmt.Fprintln(w, "tools (pinned):")
				for _, t := range pins {
					fmt.Fprintf(w, "  mcp.%s.%s  %s\n", m.Name, line(t.Name), line(firstLine(t.Description)))
				}
			}
			off, err := p.ps.Offered(ctx, m.Name)
			if err != nil {
				return err
			}
			if len(off) > 0 {
				fmt.Fprintf(w, "tools changed since approval (disabled until 'fluffy plugin approve-tools %s'):\n", m.Name)
				for _, c := range off {
					fmt.Fprintf(w, "  %s\n", line(c.Name))
				}
			}
			return nil
		},
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// printManifest shows what a manifest asks for.
func printManifest(w io.Writer, m plugin.Manifest) {
	line := termsafe.Line
	if m.Run.Image != "" {
		fmt.Fprintf(w, "  image:   %s\n", line(m.Run.Image))
	}
	if len(m.Run.Command) > 0 {
		fmt.Fprintf(w, "  command: %s\n", line(strings.Join(m.Run.Command, " ")))
	}
	for _, e := range m.Run.Env {
		fmt.Fprintf(w, "  env:     %s\n", line(e))
	}
	if len(m.Network) > 0 {
		fmt.Fprintf(w, "  network: %s\n", line(strings.Join(m.Network, ", ")))
	}
	for _, c := range m.Credentials {
		fmt.Fprintf(w, "  secret:  %s as %s %s\n", line(c.Ref), line(c.As), line(c.Name))
	}
	var caps []string
	for _, c := range m.Capabilities {
		caps = append(caps, string(c))
	}
	if len(caps) == 0 {
		caps = []string{"none"}
	}
	fmt.Fprintf(w, "  capabilities: %s\n", line(strings.Join(caps, ", ")))
}

// readPlugin parses the manifest in dir and computes its identity: the
// digest and, when the folder holds a signature, its signer (verified
// against signers; a signature that does not verify is an error).
func readPlugin(ctx context.Context, dir, signers string, requireSig bool) (plugin.Manifest, string, string, error) {
	m, err := plugin.ReadManifest(dir)
	if err != nil {
		return m, "", "", fmt.Errorf("%w: %v", errUsage, err)
	}
	digest, err := plugin.Digest(dir)
	if err != nil {
		return m, "", "", err
	}
	sig := filepath.Join(dir, plugin.SignatureName)
	if _, err := os.Lstat(sig); err != nil {
		if requireSig {
			return m, digest, "", fmt.Errorf("%w: %s has no %s and --require-signature is set", plugin.ErrSignature, dir, plugin.SignatureName)
		}
		return m, digest, "", nil
	}
	signer, err := plugin.VerifySignature(ctx, sig, signers, digest)
	return m, digest, signer, err
}

// signersFile is the allowed-signers file: --signers, else
// plugin-signers beside the user's configuration.
func (a *App) signersFile(flag string) string {
	if flag != "" {
		return a.user().Abs(flag)
	}
	return filepath.Join(filepath.Dir(a.user().UserFile()), "plugin-signers")
}

// preCheck runs the capability pre-check with the effective policy of
// the working directory's workspace and prints each decision.
func preCheck(ctx context.Context, a *App, m plugin.Manifest) ([]string, error) {
	e, _, err := a.user().PolicyEngine(nil)
	if err != nil {
		return nil, err
	}
	ws, err := policy.Canonicalize(a.user().Workspace(), a.Cwd)
	if err != nil {
		return nil, err
	}
	mode := ""
	if l, err := a.Config(); err == nil {
		mode = l.Config.TDD.Mode
	}
	checks, err := plugin.PreCheck(ctx, e, m, ws, mode)
	var lines []string
	if len(checks) == 0 {
		fmt.Fprintln(a.Stdout, "capabilities: none asked for")
	} else {
		fmt.Fprintf(a.Stdout, "capabilities asked for, as the policy of %s decides them now:\n", termsafe.Line(ws))
	}
	for _, c := range checks {
		l := fmt.Sprintf("%s %s: %s by %s", c.Capability, c.What, c.Decision.Effect, c.Decision.Rule)
		lines = append(lines, l)
		fmt.Fprintf(a.Stdout, "  %-16s %-30s %-8s %s\n", c.Capability, termsafe.Line(c.What), c.Decision.Effect, termsafe.Line(c.Decision.Rule))
	}
	if errors.Is(err, plugin.ErrBlocked) {
		return lines, &ExitError{Code: ExitBlock, Msg: err.Error() + "\nfix: change the policy, or the plugin's manifest, if the plugin should have it"}
	}
	return lines, err
}

func capNames(m plugin.Manifest) []string {
	var out []string
	for _, c := range m.Capabilities {
		out = append(out, string(c))
	}
	return out
}

func newPluginInstallCmd(a *App) *cobra.Command {
	var signers string
	var requireSig bool
	cmd := &cobra.Command{
		Use:   "install PATH",
		Short: "Install the plugin in a folder: check its manifest, identity and capabilities",
		Long: `install reads PATH/fluffy-plugin.yaml, computes the folder's digest, verifies
its signature (PATH/fluffy-plugin.sig) against the keys you trust when it has
one, and shows each capability it asks for with what the current policy
would decide for it. A capability the policy blocks refuses the install (exit
20). The plugin is recorded as installed, not enabled: 'fluffy plugin enable
NAME' turns it on. The folder stays where it is; a change to its files
disables the plugin until an enable approves them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dir, err := filepath.Abs(a.user().Abs(args[0]))
			if err != nil {
				return err
			}
			if r, err := filepath.EvalSymlinks(dir); err == nil {
				dir = r
			}
			m, digest, signer, err := readPlugin(ctx, dir, a.signersFile(signers), requireSig)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "plugin %s %s\n  folder:  %s\n  digest:  %s\n", m.Name, termsafe.Line(m.Version), termsafe.Line(dir), digest)
			if signer != "" {
				fmt.Fprintf(a.Stdout, "  signer:  %s (verified)\n", termsafe.Line(signer))
			} else {
				fmt.Fprintln(a.Stdout, "  signer:  unsigned")
			}
			printManifest(a.Stdout, m)
			checks, err := preCheck(ctx, a, m)
			if err != nil {
				return err
			}
			p, err := a.openPlugins(ctx)
			if err != nil {
				return err
			}
			defer p.Close()
			rec := plugin.Record{Manifest: m, Dir: dir, Digest: digest, Signer: signer, State: plugin.Installed,
				Reason: "installed by user", Source: dir}
			if err := p.ps.Add(ctx, rec); errors.Is(err, plugin.ErrExists) {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("a plugin %s is installed already ('fluffy plugin rm %s' first)", m.Name, m.Name)}
			} else if err != nil {
				return err
			}
			if err := recordPlugin(ctx, a, audit.PluginInstall{Plugin: m.Name, Version: m.Version, Dir: dir, Digest: digest,
				State: string(plugin.Installed), Signer: signer, Source: dir, Capabilities: capNames(m), Checks: checks}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "installed %s; 'fluffy plugin enable %s' turns it on\n", m.Name, m.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&signers, "signers", "", "allowed-signers file of the keys you trust (default: plugin-signers beside your config.yaml)")
	cmd.Flags().BoolVar(&requireSig, "require-signature", false, "refuse a plugin without a signature")
	return cmd
}

func newPluginEnableCmd(a *App) *cobra.Command {
	var yes bool
	var signers string
	cmd := &cobra.Command{
		Use:   "enable NAME",
		Short: "Turn a plugin on, after showing what changed in its folder since it was approved",
		Long: `enable reads the plugin's folder again. When its digest differs from the
one approved, it shows the old and new manifest's requests and asks (or
--yes) before approving the files as they are now. The capability pre-check
runs again with the current policy: a blocked capability refuses the enable.
The runtime starts an enabled plugin in its sandbox and pins its tools at the
first start.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			if _, err := plugin.Next(r.Manifest.Name, r.State, plugin.ActEnable); err != nil {
				return &ExitError{Code: ExitFailure, Msg: err.Error()}
			}
			m, digest, signer, err := readPlugin(ctx, r.Dir, a.signersFile(signers), false)
			if err != nil {
				return err
			}
			if m.Name != r.Manifest.Name {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the manifest in %s now names %q, not %q: 'fluffy plugin rm' and install it again", r.Dir, m.Name, r.Manifest.Name)}
			}
			if r.State == plugin.Enabled && digest == r.Digest {
				fmt.Fprintf(a.Stdout, "%s is enabled already\n", m.Name)
				return nil
			}
			old := ""
			if digest != r.Digest {
				old = r.Digest
				fmt.Fprintf(a.Stdout, "the files of %s changed since they were approved:\n  was: %s\n  now: %s\n", m.Name, r.Digest, digest)
				if r.Signer != signer {
					fmt.Fprintf(a.Stdout, "  signer was %q, is %q\n", termsafe.Line(r.Signer), termsafe.Line(signer))
				}
				fmt.Fprintln(a.Stdout, "approved manifest:")
				printManifest(a.Stdout, r.Manifest)
				fmt.Fprintln(a.Stdout, "manifest now:")
				printManifest(a.Stdout, m)
			}
			if _, err := preCheck(ctx, a, m); err != nil {
				return err
			}
			if old != "" && !yes {
				ok, err := confirm(a, "approve the plugin's files as they are now and enable it?")
				if err != nil {
					return err
				}
				if !ok {
					return &ExitError{Code: ExitFailure, Msg: "not enabled: the changed files were not approved"}
				}
			}
			reason := "enabled by user"
			if old != "" {
				reason = "enabled by user, changed files approved"
			}
			if err := p.ps.Approve(ctx, m.Name, m, digest, signer, plugin.Enabled, reason); err != nil {
				return err
			}
			if err := recordPlugin(ctx, a, audit.PluginState{Plugin: m.Name, From: string(r.State), To: string(plugin.Enabled),
				Reason: reason, Digest: digest, OldDigest: old}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "enabled %s\n", m.Name)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "approve changed files without asking")
	cmd.Flags().StringVar(&signers, "signers", "", "allowed-signers file of the keys you trust (default: plugin-signers beside your config.yaml)")
	return cmd
}

func newPluginDisableCmd(a *App) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "disable NAME",
		Short: "Turn a plugin off (the runtime stops it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			if _, err := plugin.Next(r.Manifest.Name, r.State, plugin.ActDisable); err != nil {
				return &ExitError{Code: ExitFailure, Msg: err.Error()}
			}
			why := "disabled by user"
			if reason != "" {
				why += ": " + reason
			}
			if err := p.ps.SetState(ctx, r.Manifest.Name, plugin.Disabled, why); err != nil {
				return err
			}
			if err := recordPlugin(ctx, a, audit.PluginState{Plugin: r.Manifest.Name, From: string(r.State), To: string(plugin.Disabled), Reason: why}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "disabled %s\n", r.Manifest.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record")
	return cmd
}

func newPluginRmCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Forget a plugin: its record, pinned tools, log and imported folder (an installed folder stays)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			if _, err := plugin.Next(r.Manifest.Name, r.State, plugin.ActRemove); err != nil {
				return &ExitError{Code: ExitFailure, Msg: err.Error() + fmt.Sprintf(" ('fluffy plugin disable %s' first)", r.Manifest.Name)}
			}
			if err := p.ps.Remove(ctx, r.Manifest.Name); err != nil {
				return err
			}
			// The data folder is fluffy's: the log, and the folder an
			// import generated. A folder installed from elsewhere is the
			// person's and stays.
			if err := os.RemoveAll(plugin.Folder(p.data, r.Manifest.Name)); err != nil {
				return err
			}
			if err := recordPlugin(ctx, a, audit.PluginState{Plugin: r.Manifest.Name, From: string(r.State), To: "removed", Reason: "removed by user", Digest: r.Digest}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "removed %s\n", r.Manifest.Name)
			return nil
		},
	}
}

// tailLines appends the lines of file to ring, keeping the last n (all
// when n is 0); false when the file does not exist.
func tailLines(file string, n int, ring *[]string) (bool, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		*ring = append(*ring, sc.Text())
		if n > 0 && len(*ring) > n {
			*ring = (*ring)[1:]
		}
	}
	return true, sc.Err()
}

func newPluginLogsCmd(a *App) *cobra.Command {
	var lines int
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a plugin's stderr as the runtime captured it (<data>/plugins/NAME/log, and log.1 before it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			// The runtime moves a full log to log.1: the older lines first.
			base := filepath.Join(plugin.Folder(p.data, r.Manifest.Name), plugin.LogName)
			var ring []string
			found := false
			for _, name := range []string{base + ".1", base} {
				ok, err := tailLines(name, lines, &ring)
				if err != nil {
					return err
				}
				found = found || ok
			}
			if !found {
				fmt.Fprintf(a.Stderr, "fluffy: %s has no log yet (it has not run)\n", r.Manifest.Name)
				return nil
			}
			// The server wrote it: shown escaped, never as terminal codes.
			for _, l := range ring {
				fmt.Fprintln(a.Stdout, termsafe.Line(l))
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "the last N lines (0: all)")
	return cmd
}

// printToolDiff shows, field by field, how a tool's description changed.
func printToolDiff(w io.Writer, plug string, c plugin.ToolChange) {
	line := termsafe.Line
	if c.Pinned == nil {
		fmt.Fprintf(w, "new tool mcp.%s.%s\n", plug, line(c.Name))
		fmt.Fprintf(w, "  + description: %s\n", line(c.Offered.Description))
		fmt.Fprintf(w, "  + schema:      %s\n", line(c.Offered.Schema))
		if len(c.Offered.Annotations) > 0 {
			fmt.Fprintf(w, "  + annotations: %s\n", annotations(c.Offered.Annotations))
		}
		return
	}
	fmt.Fprintf(w, "changed tool mcp.%s.%s\n", plug, line(c.Name))
	if c.Pinned.Description != c.Offered.Description {
		fmt.Fprintf(w, "  - description: %s\n  + description: %s\n", line(c.Pinned.Description), line(c.Offered.Description))
	}
	if c.Pinned.Schema != c.Offered.Schema {
		fmt.Fprintf(w, "  - schema:      %s\n  + schema:      %s\n", line(c.Pinned.Schema), line(c.Offered.Schema))
	}
	if a, b := annotations(c.Pinned.Annotations), annotations(c.Offered.Annotations); a != b {
		fmt.Fprintf(w, "  - annotations: %s\n  + annotations: %s\n", a, b)
	}
}

func annotations(m map[string]bool) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s=%v", termsafe.Line(k), v))
	}
	slices.Sort(s)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

func newPluginApproveToolsCmd(a *App) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "approve-tools NAME",
		Short: "Show how a plugin's tool descriptions changed since they were pinned, and approve them",
		Long: `A plugin's tools are pinned (name, description, input schema, annotations) at
its first start. When the server later describes a tool otherwise, or offers
a new one, that tool stays disabled: a changed description is how a server
would slip instructions to the model after you approved it. approve-tools
shows each difference and asks (or --yes) before making them the pins.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, r, err := a.openPlugin(ctx, args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			off, err := p.ps.Offered(ctx, r.Manifest.Name)
			if err != nil {
				return err
			}
			if len(off) == 0 {
				fmt.Fprintf(a.Stdout, "the tools of %s are as approved\n", r.Manifest.Name)
				return nil
			}
			for _, c := range off {
				printToolDiff(a.Stdout, r.Manifest.Name, c)
			}
			if !yes {
				ok, err := confirm(a, "approve these tool descriptions?")
				if err != nil {
					return err
				}
				if !ok {
					return &ExitError{Code: ExitFailure, Msg: "not approved: the changed tools stay disabled"}
				}
			}
			done, err := p.ps.ApproveTools(ctx, r.Manifest.Name)
			if err != nil {
				return err
			}
			ev := audit.PluginApprove{Plugin: r.Manifest.Name}
			for _, c := range done {
				ev.Tools = append(ev.Tools, c.Name)
				ev.SHA256 = append(ev.SHA256, plugin.PinSHA256(*c.Offered))
			}
			if err := recordPlugin(ctx, a, ev); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "approved %d tool description(s) of %s\n", len(done), r.Manifest.Name)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "approve without asking")
	return cmd
}

func newPluginDigestCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "digest DIR",
		Short: "Print a plugin folder's digest: what its signature signs",
		Long: `digest prints the digest install pins. An author signs it with an SSH key:

  fluffy plugin digest DIR | ssh-keygen -Y sign -f KEY -n fluffy-plugin > DIR/fluffy-plugin.sig`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := plugin.Digest(a.user().Abs(args[0]))
			if err != nil {
				return err
			}
			_, err = a.Stdout.Write(plugin.SignedMessage(d))
			return err
		},
	}
}
