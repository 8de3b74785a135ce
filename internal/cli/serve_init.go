package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// workspaceFiles are the assistant workspace's files as "fluffy serve
// init" writes them: short, commented examples a person edits. Comments
// are HTML comments so the model reads them as notes, not as content.
var workspaceFiles = []struct{ name, text string }{
	{"SOUL.md", `# Soul

<!-- Who the assistant is: its persona, tone and values. Loaded into the
system prompt. Example: -->

You are a calm, precise assistant. You say what you did and what you did not.
`},
	{"USER.md", `# User

<!-- Who you are, for the assistant: name, time zone, how you like to be
told things. Example: -->

- Name: (your name)
- Time zone: Europe/Berlin
- Prefers short answers; asks for details when needed.
`},
	{"AGENTS.md", `# How to work

<!-- How the assistant works: what to do first, what never to do without
asking. Example: -->

- Read MEMORY.md before you act; remember what you learn with memory.write (today's daily log).
- Never send a message on my behalf without asking.
`},
	{"TOOLS.md", `# Tools

<!-- Notes on the tools the assistant has: which to prefer, their quirks.
Example: -->

- Use search.grep before reading whole files.
`},
	{"HEARTBEAT.md", `# Heartbeat

<!-- A checklist the assistant works through every serve.heartbeat
(default 30m). It reports only when something needs you. Example: -->

- [ ] Anything in the inbox that needs an answer today?
`},
	{"MEMORY.md", `# Memory

<!-- Long-lived facts the assistant keeps. It edits this file only through
its change set: you see the diff and approve it. Example: -->

- (nothing yet)
`},
}

// serveSnippet is the commented serve: section "fluffy serve init" prints.
const serveSnippet = `# fluffy serve: add to your configuration (fluffy config path), then
# 'fluffy serve --check' and 'fluffy serve'. See docs/serve.md.
model: anthropic/claude-sonnet-4-5      # the model the daemon's sessions use
serve:
  workspace: %s
  health: 127.0.0.1:7878                # /healthz and /readyz (or unix:/path)
  # listen: 127.0.0.1:7879              # HTTP for webhooks (POST /hooks/NAME)
  # heartbeat: 30m                      # HEARTBEAT.md worked through this often
  # grace: 30s                          # turns in progress may end within this at SIGTERM
  # webhooks:
  #   - name: github
  #     secret: env:GITHUB_HOOK_SECRET
  #     signature: github
  #     prompt: Summarize the push and tell me if CI config changed.
  # cron:
  #   - name: morning
  #     schedule: "0 8 * * *"
  #     prompt: Plan my day from MEMORY.md.
# approval:
#   route: [{channel: matrix, room: "!room:example.org"}]
#   approvers: ["@me:example.org"]     # only these principals' answers count
`

func newServeInitCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Scaffold the assistant's workspace (SOUL.md, USER.md, AGENTS.md, TOOLS.md, HEARTBEAT.md, MEMORY.md) and print a serve: configuration",
		Long: `init creates the assistant's workspace (serve.workspace, default
~/.fluffy/workspace) with short, commented example files, never overwriting one
that exists, and prints a commented serve: section for your configuration.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if a.Core == nil {
				return errors.New("this build cannot run the daemon")
			}
			ws, err := a.Core.AssistantWorkspace(a.user())
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(ws, "memory"), 0o700); err != nil {
				return fmt.Errorf("create the workspace: %w", err)
			}
			// The workspace is its own project (fluffy serve makes sure
			// of it too): its .fluffy, not one above it, holds its
			// project files.
			if err := os.MkdirAll(filepath.Join(ws, ".fluffy"), 0o700); err != nil {
				return fmt.Errorf("create the workspace: %w", err)
			}
			for _, f := range workspaceFiles {
				p := filepath.Join(ws, f.name)
				// O_EXCL: a file the person already has is theirs.
				fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if errors.Is(err, fs.ErrExist) {
					fmt.Fprintf(a.Stderr, "kept %s (exists)\n", p)
					continue
				}
				if err != nil {
					return fmt.Errorf("write %s: %w", p, err)
				}
				_, err = fh.WriteString(f.text)
				if cerr := fh.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("write %s: %w", p, err)
				}
				fmt.Fprintf(a.Stderr, "wrote %s\n", p)
			}
			fmt.Fprintf(a.Stdout, serveSnippet, ws)
			return nil
		},
	}
}

// unitText is the systemd user unit running binary serve.
func unitText(binary string) string {
	return fmt.Sprintf(`# fluffy's assistant daemon as a systemd user service (docs/serve.md).
# Install: fluffy serve install-unit; then
#   systemctl --user daemon-reload && systemctl --user enable --now fluffy
# To keep it running while you are logged out: loginctl enable-linger $USER
[Unit]
Description=fluffy assistant daemon
After=network-online.target

[Service]
Type=simple
ExecStart=%s serve
# SIGTERM stops the channels and gives turns serve.grace to end.
KillSignal=SIGTERM
TimeoutStopSec=60
Restart=on-failure
RestartSec=5

# Hardening that leaves the native sandbox working (docs/deploy.md says why
# each is here, and why ProtectKernelTunables, ProtectHome, PrivateTmp,
# RestrictNamespaces and MemoryDenyWriteExecute are not).
NoNewPrivileges=yes
ProtectSystem=full
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native
# The daemon and every sandbox it runs count against these.
MemoryHigh=6G
MemoryMax=8G
TasksMax=4096

[Install]
WantedBy=default.target
`, binary)
}

func newServeInstallUnitCmd(a *App) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "install-unit",
		Short: "Write the systemd user unit running 'fluffy serve' ($XDG_CONFIG_HOME/systemd/user/fluffy.service)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			dir, ok := a.Getenv("XDG_CONFIG_HOME")
			if !ok || dir == "" {
				home, hok := a.Getenv("HOME")
				if !hok || home == "" {
					return fmt.Errorf("%w: neither $XDG_CONFIG_HOME nor $HOME is set", errUsage)
				}
				dir = filepath.Join(home, ".config")
			}
			dir = filepath.Join(dir, "systemd", "user")
			// The unit runs the small front binary installed beside this
			// one when there is one: it execs this one for serve.
			bin := a.Self
			if front := filepath.Join(filepath.Dir(a.Self), "fluffy"); strings.HasSuffix(a.Self, "-core") {
				if _, err := os.Stat(front); err == nil {
					bin = front
				}
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", dir, err)
			}
			p := filepath.Join(dir, "fluffy.service")
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(p, flags, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%s exists; --force replaces it", p)}
			}
			if err != nil {
				return err
			}
			_, err = f.WriteString(unitText(bin))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
			fmt.Fprintf(a.Stdout, "wrote %s\nstart it: systemctl --user daemon-reload && systemctl --user enable --now fluffy\n", p)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing unit")
	return cmd
}
