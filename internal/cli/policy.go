package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// Exit codes of fluffy policy check.
const (
	ExitApprove = 10
	ExitBlock   = 20
)

func newPolicyCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check operations against the policy, lint and test policy files",
		Long: `fluffy's policy decides, for every operation the agent attempts, allow,
approve (ask a person) or block. Policy is made of built-in rules (always on),
your file $XDG_CONFIG_HOME/fluffy/policy.yaml, the project's
<repo>/.fluffy/policy.yaml (which may only tighten) and the default rule set.
See docs/policy.md.`,
	}
	cmd.AddCommand(newPolicyCheckCmd(a), newPolicyLintCmd(a), newPolicyTestCmd(a), newPolicyExplainCmd(a))
	return cmd
}

type opSpec struct {
	tool, action, size, shell, mode string
	paths, hosts, argv              []string
	written                         []string // files the agent wrote (--agent-written)
}

// build turns flags into a normalized operation in the workspace.
func (a *App) buildOperation(s opSpec) (operation.Operation, error) {
	if s.tool == "" {
		return operation.Operation{}, fmt.Errorf("%w: --tool is required", errUsage)
	}
	act := operation.Action(s.action)
	if act == "" {
		act = operation.GuessAction(s.tool)
		if act == "" {
			return operation.Operation{}, fmt.Errorf("%w: cannot tell the action of tool %q; give --action (read, write, exec, net, secret, message)", errUsage, s.tool)
		}
	}
	if !act.Valid() {
		return operation.Operation{}, fmt.Errorf("%w: unknown action %q; use read, write, exec, net, secret or message", errUsage, s.action)
	}
	if s.shell != "" && len(s.argv) > 0 {
		return operation.Operation{}, fmt.Errorf("%w: give either --shell or an argv after --, not both", errUsage)
	}
	mode := s.mode
	if mode == "" {
		if l, err := a.Config(); err == nil {
			mode = l.Config.TDD.Mode
		}
	}
	op := operation.Operation{Tool: s.tool, Action: act, Argv: s.argv, CommandLine: s.shell,
		Session: operation.Session{ID: "cli", Mode: mode, Workspace: a.user().Workspace()}}
	if s.size != "" {
		n, err := units.ParseSize(s.size)
		if err != nil {
			return op, fmt.Errorf("%w: --size: %v", errUsage, err)
		}
		op.Size = int64(n)
	}
	for _, p := range s.paths {
		op.Paths = append(op.Paths, operation.Path{Raw: p})
	}
	for _, h := range s.hosts {
		name, port, hasPort := strings.Cut(h, ":")
		hp := operation.Host{Name: name}
		if hasPort {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return op, fmt.Errorf("%w: --host %q: port must be 1-65535", errUsage, h)
			}
			hp.Port = n
		}
		if name == "" {
			return op, fmt.Errorf("%w: --host %q has no name", errUsage, h)
		}
		op.Hosts = append(op.Hosts, hp)
	}
	if err := policy.Normalize(&op, a.Cwd); err != nil {
		return op, fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, w := range s.written {
		c, err := policy.Canonicalize(w, a.Cwd)
		if err != nil {
			return op, fmt.Errorf("%w: --agent-written %q: %v", errUsage, w, err)
		}
		op.AgentWritten = append(op.AgentWritten, c)
	}
	return op, nil
}

func newPolicyCheckCmd(a *App) *cobra.Command {
	var s opSpec
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check --tool TOOL [--path P] [--host H:PORT] [--size N] [--agent-written PATH] [--shell 'CMDLINE' | -- ARGV...]",
		Short: "Decide one operation with the effective policy",
		Long: `check evaluates one operation in the current directory's workspace with the
effective policy and prints the decision, the deciding rule and the reason.

Exit status: 0 allow, 10 approve, 20 block, 2 bad input or invalid policy.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash > 0 {
					return fmt.Errorf("%w: unexpected arguments before --: %q", errUsage, args[:dash])
				}
				s.argv = args
			} else if len(args) > 0 {
				return fmt.Errorf("%w: unexpected arguments %q (put a command after --)", errUsage, args)
			}
			e, _, err := a.user().PolicyEngine(nil)
			if err != nil {
				return err
			}
			op, err := a.buildOperation(s)
			if err != nil {
				return err
			}
			d := e.Decide(cmd.Context(), op)
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				if err := enc.Encode(d); err != nil {
					return err
				}
			} else {
				printDecision(a, d)
			}
			switch d.Effect {
			case policy.Allow:
				return nil
			case policy.Approve:
				return &ExitError{Code: ExitApprove}
			}
			return &ExitError{Code: ExitBlock}
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.tool, "tool", "", "tool name (fs.read, fs.write, shell.exec, net.fetch, ...)")
	f.StringVar(&s.action, "action", "", "action (read, write, exec, net, secret, message); default from the tool name")
	f.StringArrayVar(&s.paths, "path", nil, "a path the operation reads or writes (repeatable)")
	f.StringArrayVar(&s.hosts, "host", nil, "a network destination host:port (repeatable)")
	f.StringVar(&s.size, "size", "", "bytes written or sent (12MiB, 1GB, 4096)")
	f.StringVar(&s.shell, "shell", "", "a command line as a model writes it")
	f.StringVar(&s.mode, "mode", "", "TDD mode of the session (default tdd.mode)")
	f.StringArrayVar(&s.written, "agent-written", nil, "a file the agent wrote in the session, as the change set would say (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the decision as JSON")
	return cmd
}

func printDecision(a *App, d policy.Decision) {
	// Rules, their reasons and sources can come from a project's policy
	// file, which the repository's author wrote.
	line := termsafe.Line
	fmt.Fprintf(a.Stdout, "%s by %s\n", d.Effect, line(d.Rule))
	fmt.Fprintf(a.Stdout, "  reason: %s\n", line(d.Reason))
	if d.Subject != "" {
		fmt.Fprintf(a.Stdout, "  on: %s\n", line(d.Subject))
	}
	if d.Source != "" {
		fmt.Fprintf(a.Stdout, "  rule from: %s\n", line(d.Source))
	}
	if len(d.Matched) > 0 {
		fmt.Fprintln(a.Stdout, "  matched:")
		for _, m := range d.Matched {
			l := fmt.Sprintf("    %-7s %s (%s) on %s", m.Effect, line(m.Rule), m.Layer, line(m.Subject))
			if m.Shadowed {
				l += " [shadowed]"
			}
			if m.Error != "" {
				l += " [error: " + line(m.Error) + "]"
			}
			fmt.Fprintln(a.Stdout, l)
		}
	}
}

func newPolicyLintCmd(a *App) *cobra.Command {
	var project bool
	cmd := &cobra.Command{
		Use:   "lint [FILE]",
		Short: "Check policy files: the effective ones, or one file",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.user().PolicyOptions()
			if err != nil {
				return err
			}
			var srcs []policy.Source
			if len(args) == 1 {
				layer := policy.LayerUser
				if project {
					layer = policy.LayerProject
				}
				src, err := policy.ReadSource(args[0], layer)
				if err != nil {
					return fmt.Errorf("%w: %v", errUsage, err)
				}
				srcs = append(srcs, src)
			} else {
				srcs, _, err = a.user().PolicyFiles().Read()
				if err != nil {
					return err
				}
			}
			e, err := policy.Compile(opts, srcs...)
			if err != nil {
				msg := strings.TrimPrefix(err.Error(), policy.ErrInvalid.Error()+":\n")
				fmt.Fprintln(a.Stderr, termsafe.String(msg))
				return &ExitError{Code: ExitFailure, Msg: "policy is invalid"}
			}
			if len(srcs) == 0 {
				fmt.Fprintln(a.Stdout, "no policy files; built-in and default rules only")
			}
			counts := map[string]int{}
			for _, r := range e.Rules() {
				file, _, _ := strings.Cut(r.Source, ":")
				counts[file]++
			}
			for _, s := range srcs {
				fmt.Fprintf(a.Stdout, "%s: valid (%d rules)\n", s.Name, counts[s.Name])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&project, "project", false, "lint FILE as a project policy (may only tighten)")
	return cmd
}

// policyTestFile is the format of fluffy policy test's files.
// maxPolicyTestFile bounds one file of `fluffy policy test`.
const maxPolicyTestFile = 1 << 20

type policyTestFile struct {
	Tests []policyTestCase `yaml:"tests"`
}

type policyTestCase struct {
	Name   string   `yaml:"name"`
	Tool   string   `yaml:"tool"`
	Action string   `yaml:"action"`
	Path   []string `yaml:"path"`
	Host   []string `yaml:"host"`
	Size   string   `yaml:"size"`
	Shell  string   `yaml:"shell"`
	Argv   []string `yaml:"argv"`
	Mode   string   `yaml:"mode"`
	// AgentWritten lists files the agent wrote (as --agent-written).
	AgentWritten []string `yaml:"agent_written"`
	Want         string   `yaml:"want"`
	Rule         string   `yaml:"rule"`
}

func newPolicyTestCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "test DIR",
		Short: "Run your own policy test cases (DIR/*.yaml) against the effective policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, _, err := a.user().PolicyEngine(nil)
			if err != nil {
				return err
			}
			dir := args[0]
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(a.Cwd, dir)
			}
			files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
			if err != nil || len(files) == 0 {
				return fmt.Errorf("%w: no *.yaml test files in %s", errUsage, args[0])
			}
			sort.Strings(files)
			pass, fail := 0, 0
			for _, file := range files {
				data, err := regfile.ReadFile(file, maxPolicyTestFile)
				if err != nil {
					return err
				}
				var tf policyTestFile
				dec := yaml.NewDecoder(strings.NewReader(string(data)))
				dec.KnownFields(true)
				if err := dec.Decode(&tf); err != nil {
					return fmt.Errorf("%w: %s: %v", errUsage, file, err)
				}
				for i, tc := range tf.Tests {
					name := tc.Name
					if name == "" {
						name = fmt.Sprintf("%s #%d", filepath.Base(file), i+1)
					}
					want, err := policy.ParseEffect(tc.Want)
					if err != nil {
						return fmt.Errorf("%w: %s: test %q: want: %v", errUsage, file, name, err)
					}
					op, err := a.buildOperation(opSpec{tool: tc.Tool, action: tc.Action, size: tc.Size, shell: tc.Shell, mode: tc.Mode, paths: tc.Path, hosts: tc.Host, argv: tc.Argv, written: tc.AgentWritten})
					if err != nil {
						return fmt.Errorf("%s: test %q: %w", file, name, err)
					}
					d := e.Explain(cmd.Context(), op)
					if d.Effect == want && (tc.Rule == "" || tc.Rule == d.Rule) {
						pass++
						fmt.Fprintf(a.Stdout, "PASS %s\n", name)
						continue
					}
					fail++
					w := want.String()
					if tc.Rule != "" {
						w += " by " + tc.Rule
					}
					fmt.Fprintf(a.Stdout, "FAIL %s: got %s by %s, want %s\n", name, d.Effect, d.Rule, w)
				}
			}
			fmt.Fprintf(a.Stdout, "%d passed, %d failed\n", pass, fail)
			if fail > 0 {
				return &ExitError{Code: ExitFailure}
			}
			return nil
		},
	}
}

func newPolicyExplainCmd(a *App) *cobra.Command {
	var showDefault, showExec, asJSON bool
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "List the effective rules and where each came from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showDefault {
				_, err := a.Stdout.Write(policy.DefaultRules)
				return err
			}
			e, files, err := a.user().PolicyEngine(nil)
			if err != nil {
				return err
			}
			if showExec {
				return printExecTable(a, e, asJSON)
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Default string            `json:"default"`
					Files   policy.Files      `json:"files"`
					Rules   []policy.RuleInfo `json:"rules"`
				}{e.Default().String(), files, e.Rules()})
			}
			for _, f := range []struct{ name, path string }{{"user policy", files.User}, {"project policy", files.Project}} {
				state := "(absent)"
				if f.path == "" {
					state = "(no project)"
				} else if fileExists(f.path) {
					state = ""
				}
				fmt.Fprintf(a.Stdout, "%-15s %s %s\n", f.name, f.path, state)
			}
			fmt.Fprintf(a.Stdout, "%-15s %s (policy.default)\n\n", "when no match", e.Default())
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RULE\tEFFECT\tLAYER\tSOURCE\tDESCRIPTION")
			for _, r := range e.Rules() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termsafe.Line(r.ID), r.Effect, r.Layer, termsafe.Line(r.Source), termsafe.Line(r.Description))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, "\nBuilt-in rules always apply. User and project rules decide what they match;\nthe default rules decide the rest ('fluffy policy explain --default' prints them).")
			return nil
		},
	}
	cmd.Flags().BoolVar(&showDefault, "default", false, "print the default rule set (YAML)")
	cmd.Flags().BoolVar(&showExec, "exec-capable", false, "list the exec-capable table: the programs and variables that run other code, with their sources")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// printExecTable lists the effective exec-capable table: entries of the
// policy files first, then the embedded ones.
func printExecTable(a *App, e *policy.Engine, asJSON bool) error {
	entries := e.ExecEntries()
	if asJSON {
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMES\tORIGIN\tSOURCE")
	for _, x := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.Join(x.Names, ","), x.Origin, x.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.Stdout, "\nAn allow rule for one of these programs does not allow what it is told to run\n(see docs/policy.md, \"Programs that run other code\").")
	return nil
}
