package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Exit codes of 'fluffy sandbox run' besides the command's own status and
// 128+signal. Documented in docs/sandbox.md.
const (
	ExitSandboxLimit   = sandboxrun.ExitLimit    // a resource limit (memory, CPU, file size) killed the command
	ExitSandboxTimeout = sandboxrun.ExitTimeout  // the wall-clock timeout killed the command
	ExitSandboxSetup   = sandboxrun.ExitSetup    // the sandbox could not be set up; nothing ran
	ExitSandboxNoCmd   = sandboxrun.ExitNotFound // the command was not found inside the sandbox
)

// newSandboxCmd is 'fluffy sandbox' with run and the given subcommands.
func newSandboxCmd(a *App, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run commands the way fluffy runs the model's commands",
		Long: `fluffy runs every command a model proposes in a sandbox: new user, mount,
PID, network, IPC, UTS and cgroup namespaces; a minimal read-only root; the
workspace mounted as an overlay whose writes land in a change set; no
capabilities, no_new_privs, landlock, seccomp, rlimits and a cgroup.

'fluffy sandbox run' runs one command that way; 'fluffy sandbox diff' shows
what it wrote. See docs/sandbox.md. 'fluffy sandbox run' goes to your
sandbox server, which fluffy starts on first use ('fluffy sandbox server'
shows and stops it; docs/sandbox-server.md).`,
	}
	cmd.AddCommand(newSandboxRunCmd(a))
	cmd.AddCommand(subs...)
	return cmd
}

type sandboxRunFlags struct {
	template      string
	workspace     string
	changeset     string
	noWorkspace   bool
	timeout       string
	memory        string
	env           []string
	allowDegraded bool
	quiet         bool
	trace         bool
	runtime       string
	net           string
	allowHosts    []string
	egressLog     string
}

func newSandboxRunCmd(a *App) *cobra.Command {
	var f sandboxRunFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command in the sandbox",
		Long: `Run a command in the sandbox and exit with its status.

The workspace (default: the current directory) is visible at its own path,
read-only underneath: every write lands in the change set directory
(--changeset). Without --changeset the writes go to a temporary change set
that is discarded afterwards: in memory unless TMPDIR is set, else in TMPDIR.
In memory it is a file system of the sandbox's own, at most the memory limit
(--memory) in size: writes beyond it fail (no space left on device) and the
run exits 123 if the command did not fail itself; with a memory cgroup what
it holds counts against the limit as well. Review what was written with
'fluffy sandbox diff --changeset DIR'.

Nothing from your environment enters the sandbox except your PATH, HOME=/tmp and
LANG, and what you pass with --env KEY=VALUE (or --env KEY to pass your own
value of KEY).

There is no network. With --net proxy the command reaches exactly the hosts
given with --allow-host (and in net.allow / net.templates of your own
configuration) through fluffy's audited egress proxy; anything else gets a
403 naming the rule, reported here. See docs/network.md.

Exit status: the command's own; 128+N when signal N ended it;
  123  a resource limit (memory, CPU time, file size) killed it, or the
       in-memory change set filled up
  124  the timeout killed it
  125  the sandbox could not be set up (nothing ran)
  127  the command was not found inside the sandbox
    2  bad flags or configuration`,
		Example: `  fluffy sandbox run -- /bin/true
  fluffy sandbox run --changeset /tmp/cs -- sh -c 'echo hi > hello.txt'
  fluffy sandbox diff --changeset /tmp/cs
  fluffy sandbox run --timeout 5s --memory 256MiB -- make test
  fluffy sandbox run --net proxy --allow-host pypi.org --allow-host files.pythonhosted.org -- pip download requests`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandbox(cmd, a, &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.template, "template", "", "sandbox template: code-executor, integration-test, policy-sandbox, ai-provider (default from sandbox.template)")
	fl.StringVar(&f.workspace, "workspace", "", "workspace directory, mounted read-only under an overlay (default: the current directory)")
	fl.StringVar(&f.changeset, "changeset", "", "directory receiving the writes to the workspace (default: a temporary one, discarded, in /dev/shm or TMPDIR)")
	fl.BoolVar(&f.noWorkspace, "no-workspace", false, "mount no workspace at all")
	fl.StringVar(&f.timeout, "timeout", "", "wall-clock limit, e.g. 30s, 10m (default from sandbox.timeout)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512MiB (default from sandbox.memory)")
	fl.StringArrayVar(&f.env, "env", nil, "set KEY=VALUE inside, or pass your KEY through (repeatable)")
	fl.BoolVar(&f.allowDegraded, "allow-degraded", false, "run even when the host lacks a protection, saying which (config sandbox.allow_degraded)")
	fl.StringVar(&f.runtime, "runtime", "", "sandbox backend: native, docker, podman (default from sandbox.runtime)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print no warnings about weaker limits")
	fl.BoolVar(&f.trace, "trace", false, "print the time each stage of the sandbox set-up and teardown took (to stderr)")
	fl.StringVar(&f.net, "net", "", "network: none, or proxy (only allow-listed hosts, through the audited egress proxy; see docs/network.md) (default from the template)")
	fl.StringArrayVar(&f.allowHosts, "allow-host", nil, "with --net proxy, allow HOST, HOST:PORT, *.DOMAIN[:PORT] or IP:PORT (repeatable)")
	fl.StringVar(&f.egressLog, "egress-log", "", "with --net proxy, append one JSON line per request to this file")
	fl.SetInterspersed(false)
	return cmd
}

func runSandbox(cmd *cobra.Command, a *App, f *sandboxRunFlags, args []string) error {
	if a.Host != nil {
		l, err := a.Config()
		if err != nil {
			return err
		}
		if l.Config.Sandbox.Server == "off" {
			a.handOver = true // nothing done yet: the client runs it itself
			return nil
		}
	}
	req := sandboxrun.Request{User: a.user(), Argv: args,
		Template: f.template, Workspace: f.workspace, NoWorkspace: f.noWorkspace, ChangeSet: f.changeset,
		Timeout: f.timeout, Memory: f.memory, Env: f.env, AllowDegraded: f.allowDegraded, Quiet: f.quiet,
		Runtime: f.runtime, Net: f.net, AllowHosts: f.allowHosts, EgressLog: f.egressLog,
		Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr, Observer: a.ExecObserver, Host: a.Host}
	if f.trace {
		req.Trace = a.Stderr
	}
	if a.early != nil && a.Host != nil {
		req.Early = func(o sandboxrun.Outcome, err error) { a.replyEarly(a.sandboxExit(o, err)) }
	}
	o, err := a.Core.RunSandbox(cmd.Context(), req)
	if a.replied {
		return nil // the caller has its status (replyEarly)
	}
	return a.sandboxExit(o, err)
}

// sandboxExit prints a run's notes and returns the error that gives its
// exit status.
func (a *App) sandboxExit(o sandboxrun.Outcome, err error) error {
	if err != nil {
		return err
	}
	for _, n := range o.Notes {
		fmt.Fprintln(a.Stderr, "fluffy:", n)
	}
	if o.Code == 0 {
		return nil
	}
	return &ExitError{Code: o.Code, Msg: o.Msg}
}

// treeBytes is the space the regular files under dir take.
func treeBytes(dir string) int64 { return sandboxrun.TreeBytes(dir) }

// quotePath shows a path as is when it is plain printable text, else Go
// quoted, so a name cannot smuggle control sequences to the terminal.
func quotePath(p string) string {
	for _, r := range p {
		// An invalid byte (utf8.RuneError) may be a C1 control, 0x9b
		// is CSI, on a terminal that reads 8-bit controls.
		if !unicode.IsPrint(r) || r == '"' || r == '\\' || r == utf8.RuneError {
			return strconv.Quote(p)
		}
	}
	return p
}

func newSandboxDiffCmd(a *App) *cobra.Command {
	var workspace, changesetDir string
	var stat, asJSON bool
	cmd := &cobra.Command{
		Use:   "diff --changeset DIR [--workspace DIR]",
		Short: "Show what a sandboxed command wrote, as a unified diff",
		Long: `Show the files a sandboxed command added, modified and deleted in its change
set, compared with the workspace (default: the current directory), as a
unified diff. Nothing is written: the workspace stays as it is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if changesetDir == "" {
				return fmt.Errorf("%w: --changeset DIR is required", errUsage)
			}
			if workspace == "" {
				workspace = a.Cwd
			}
			if fi, err := os.Stat(changesetDir); err != nil || !fi.IsDir() {
				return fmt.Errorf("%w: --changeset %s: not a directory", errUsage, changesetDir)
			}
			cs, err := changeset.OpenUpper(changesetDir, workspace)
			if err != nil {
				return err
			}
			changes, err := cs.Changes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if changes == nil {
					changes = []changeset.Change{}
				}
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(changes)
			}
			if stat {
				for _, c := range changes {
					fmt.Fprintf(a.Stdout, "%-8s %s\n", c.Op, quotePath(c.Path))
				}
				return nil
			}
			d, err := cs.Diff(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprint(a.Stdout, diffOut(a.Stdout, d))
			return nil
		},
	}
	cmd.Flags().StringVar(&changesetDir, "changeset", "", "change set directory written by 'fluffy sandbox run --changeset'")
	cmd.Flags().StringVar(&workspace, "workspace", "", "workspace the change set applies to (default: the current directory)")
	cmd.Flags().BoolVar(&stat, "stat", false, "list the changed paths only")
	cmd.Flags().BoolVar(&asJSON, "json", false, "list the changed paths as JSON")
	return cmd
}

func newSandboxProfileCmd(a *App) *cobra.Command {
	var docker bool
	cmd := &cobra.Command{
		Use:   "seccomp [PROFILE]",
		Short: "Show a seccomp profile (strict, standard, standard-net)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				for _, p := range sandbox.Profiles() {
					fmt.Fprintf(a.Stdout, "%-13s %s\n", p.Name, p.Description)
				}
				return nil
			}
			p, err := sandbox.ProfileByName(args[0])
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			if docker {
				b, err := p.DockerJSON("")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(a.Stdout, string(b))
				return err
			}
			for _, r := range p.Rules {
				cond := ""
				for _, arg := range r.Args {
					cond += fmt.Sprintf(" if arg%d %s %#x", arg.Index, arg.Op, arg.Value)
				}
				fmt.Fprintf(a.Stdout, "deny %s%s -> %s  (%s)\n", strings.Join(r.Names, ","), cond, r.Errno.Error(), r.Why)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&docker, "docker", false, "print the profile as Docker/OCI seccomp JSON")
	return cmd
}
