package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// Exit codes of 'fluffy sandbox run' besides the command's own status and
// 128+signal. Documented in docs/sandbox.md.
const (
	ExitSandboxLimit   = 123 // a resource limit (memory, CPU, file size) killed the command
	ExitSandboxTimeout = 124 // the wall-clock timeout killed the command
	ExitSandboxSetup   = 125 // the sandbox could not be set up; nothing ran
	ExitSandboxNoCmd   = 127 // the command was not found inside the sandbox
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
	l, err := a.Config()
	if err != nil {
		return err
	}
	c := l.Config.Sandbox
	if a.Host != nil && c.Server == "off" {
		a.handOver = true // nothing done yet: the client runs it itself
		return nil
	}
	tname := f.template
	if tname == "" {
		tname = c.Template
	}
	tpl, err := sandbox.TemplateByName(tname)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	// Every execution is recorded in the audit log before it starts and
	// before its result is used; so is every egress request. The log is
	// opened at once, beside the rest of the set-up: a process's first
	// open is its slowest (SQLite cold, the signature tables). close
	// waits for an open under way.
	observer := a.ExecObserver
	var rec *auditRecorder
	if observer == nil {
		rec = openSandboxAudit(cmd.Context(), a, tpl.Name)
		defer rec.close()
		observer = rec
		go func() { _, _ = rec.get() }()
	}
	spec := sandbox.Spec{
		Argv:    args,
		Env:     a.user().SandboxEnv(),
		TmpSize: int64(c.TmpSize),
		Limits: sandbox.Limits{
			Wall:   time.Duration(c.Timeout),
			Memory: int64(c.Memory),
			Pids:   c.Pids,
			Output: int64(c.OutputLimit),
		},
		Stdin:  a.Stdin,
		Stdout: a.Stdout,
		Stderr: a.Stderr,
	}
	if f.timeout != "" {
		d, err := units.ParseDuration(f.timeout)
		if err != nil {
			return fmt.Errorf("%w: --timeout: %w", errUsage, err)
		}
		spec.Limits.Wall = time.Duration(d)
	}
	if f.memory != "" {
		s, err := units.ParseSize(f.memory)
		if err != nil {
			return fmt.Errorf("%w: --memory: %w", errUsage, err)
		}
		spec.Limits.Memory = int64(s)
	}
	for _, e := range f.env {
		k, v, ok := strings.Cut(e, "=")
		if k == "" {
			return fmt.Errorf("%w: --env %q: want KEY=VALUE or KEY", errUsage, e)
		}
		if !ok {
			hv, found := a.Getenv(k)
			if !found {
				return fmt.Errorf("%w: --env %s: not set in your environment", errUsage, k)
			}
			v = hv
		}
		spec.Env = append(spec.Env, k+"="+v)
	}
	runtime := f.runtime
	if runtime == "" {
		runtime = c.Runtime
	}
	var tempCS string
	var tempInMemory bool
	// ahead: the sandbox server's native runtime, which builds the next
	// run's sandbox ahead (SandboxHost.prepareNext).
	ahead := a.Host != nil && a.early != nil && (runtime == "" || runtime == "native") && !f.trace
	if tpl.Workspace && !f.noWorkspace {
		ws := f.workspace
		if ws == "" {
			ws = a.Cwd
		}
		ws = a.abs(ws)
		spec.Workspace = ws
		spec.Dir = ws
		if a.Cwd == ws || strings.HasPrefix(a.Cwd, ws+"/") {
			spec.Dir = a.Cwd
		}
		cs := f.changeset
		if cs == "" {
			// In the sandbox server, the one a sandbox was built ahead
			// on (SandboxHost.prepareNext), if it is for this run.
			dir, inMemory, ok := "", false, false
			if ahead {
				dir, inMemory, ok = a.Host.takeScratch(scratchKey(a, runtime, ws))
			}
			if !ok {
				var err error
				if dir, inMemory, err = a.throwawayChangeSet(runtime); err != nil {
					return err
				}
			}
			tempInMemory = inMemory
			if inMemory && spec.Limits.Memory > 0 {
				// Kept inside the sandbox, bounded by the memory limit:
				// an RLIMIT_AS fallback does not count tmpfs pages, and
				// the host's /dev/shm is sized to all of RAM.
				spec.ChangeSetSize = spec.Limits.Memory
			}
			defer os.RemoveAll(dir)
			cs = filepath.Join(dir, "upper")
			tempCS = cs
		}
		spec.ChangeSet = a.abs(cs)
	} else if f.workspace != "" || f.changeset != "" {
		if !f.noWorkspace {
			return fmt.Errorf("%w: template %s mounts no workspace; drop --workspace/--changeset", errUsage, tpl.Name)
		}
	}
	tpl.Apply(&spec)
	if f.noWorkspace {
		spec.Workspace, spec.ChangeSet = "", ""
	}
	masks, err := a.user().SandboxMasks(spec.Workspace)
	if err != nil {
		return err
	}
	spec.Mounts = append(spec.Mounts, masks...)
	switch f.net {
	case "":
	case string(sandbox.NetworkNone), string(sandbox.NetworkProxy):
		spec.Network = sandbox.Network(f.net)
	default:
		return fmt.Errorf("%w: --net %q: want none or proxy", errUsage, f.net)
	}
	if spec.Network == sandbox.NetworkProxy {
		if spec.Seccomp == "standard" {
			// The forwarder is reached over TCP on loopback.
			spec.Seccomp = "standard-net"
		}
		eg, err := startEgress(a, rec, l.Config.Net, tpl.Name, f.allowHosts, f.egressLog)
		if err != nil {
			return err
		}
		defer eg.close()
		spec.ProxySocket = eg.socket
		// The proxy variables first: a later --env of the same name wins.
		base := len(a.user().SandboxEnv())
		spec.Env = append(append(spec.Env[:base:base], eg.env...), spec.Env[base:]...)
	} else if len(f.allowHosts) > 0 || f.egressLog != "" {
		return fmt.Errorf("%w: --allow-host and --egress-log need --net proxy", errUsage)
	} else if rec != nil {
		rec.closeAtEnd = true
	}

	var trace io.Writer
	if f.trace {
		trace = a.Stderr
	}
	rt, release, err := newSandboxRuntime(cmd.Context(), a, runtime, tpl.Name, c.Image, f.allowDegraded || c.AllowDegraded, trace)
	if err != nil {
		if errors.Is(err, errUsage) {
			return err
		}
		return &ExitError{Code: ExitSandboxSetup, Msg: "sandbox: " + err.Error()}
	}
	defer release()
	if a.early == nil || a.Host == nil {
		res, err := sandbox.Observe(rt, observer).Run(cmd.Context(), spec)
		return sandboxOutcome(cmd.Context(), a, f, spec, tempCS, tempInMemory, res, err)
	}
	// In the sandbox server: the client is answered as soon as the
	// outcome is recorded; the sandbox is torn down after (Run returns
	// then, and the deferred clean-up runs).
	type outcome struct {
		res sandbox.Result
		err error
	}
	reported, final := make(chan outcome, 1), make(chan outcome, 1)
	run := sandbox.ObserveReported(rt, observer, func(res sandbox.Result, err error) { reported <- outcome{res, err} })
	go func() {
		res, err := run.Run(cmd.Context(), spec)
		final <- outcome{res, err}
	}()
	o := <-reported
	exitErr := sandboxOutcome(cmd.Context(), a, f, spec, tempCS, tempInMemory, o.res, o.err)
	a.replyEarly(exitErr)
	fin := <-final
	if fin.err != nil && o.err == nil {
		a.Host.logger.Warn("sandbox: after the reply", "err", fin.err) // the caller is gone
	}
	if nrt, ok := rt.(*native.Runtime); ok && ahead && fin.err == nil && (tempCS != "" || spec.Workspace == "") && spec.Network != sandbox.NetworkProxy {
		// The next run like this one finds its sandbox built.
		a.Host.prepareNext(a, nrt, runtime, spec)
	}
	return exitErr
}

// sandboxOutcome says what a run's result means to the user: warnings and
// notes on stderr, and the error that gives the exit status.
func sandboxOutcome(ctx context.Context, a *App, f *sandboxRunFlags, spec sandbox.Spec, tempCS string, tempInMemory bool, res sandbox.Result, err error) error {
	for _, w := range res.Warnings {
		if strings.HasPrefix(w, "DEGRADED") || !f.quiet {
			fmt.Fprintln(a.Stderr, "fluffy: sandbox:", w)
		}
	}
	if err != nil {
		if sig, ok := interruptedBy(ctx); ok && errors.Is(err, context.Canceled) {
			// Ctrl-C (or a kill) while the command ran: the sandbox is
			// gone with everything in it; exit as a shell would.
			return &ExitError{Code: 128 + int(sig), Msg: fmt.Sprintf("sandbox: interrupted by %s; the command and everything it started were killed", sandboxd.SignalName(sig))}
		}
		switch {
		case errors.Is(err, sandbox.ErrCommandNotFound):
			return &ExitError{Code: ExitSandboxNoCmd, Msg: "sandbox: " + strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": ")}
		case errors.Is(err, sandbox.ErrInvalidSpec):
			return fmt.Errorf("%w: %w", errUsage, err)
		default:
			return &ExitError{Code: ExitSandboxSetup, Msg: "sandbox: " + err.Error()}
		}
	}
	csFull := res.HitLimit(sandbox.LimitChangeSet)
	switch {
	case tempCS != "" && spec.ChangeSetSize > 0:
		// Kept inside the sandbox: gone with it, counted there.
		if res.ChangeSetWritten {
			fmt.Fprintln(a.Stderr, "fluffy: sandbox: the changes to the workspace were discarded (the throw-away change set was in memory); pass --changeset DIR to keep them")
		}
	case tempCS != "":
		if ch, err := upperChanges(ctx, spec.Workspace, tempCS); err == nil && len(ch) > 0 {
			fmt.Fprintf(a.Stderr, "fluffy: sandbox: %d change(s) to the workspace were discarded; pass --changeset DIR to keep them\n", len(ch))
		}
	}
	csFullMsg := fmt.Sprintf("sandbox: the throw-away change set hit its size bound (%s, the memory limit): writes to the workspace beyond it failed with ENOSPC (no space left on device); pass --changeset DIR to write them to disk, or raise --memory", units.Size(spec.ChangeSetSize))
	if res.HitLimit(sandbox.LimitPids) && !f.quiet {
		fmt.Fprintf(a.Stderr, "fluffy: sandbox: the process limit (%d) refused at least one fork\n", spec.Limits.Pids)
	}
	if res.HitLimit(sandbox.LimitTmp) && !f.quiet {
		fmt.Fprintf(a.Stderr, "fluffy: sandbox: /tmp filled up (%s)\n", units.Size(spec.TmpSize))
	}
	switch res.Killed {
	case sandbox.LimitTime:
		return &ExitError{Code: ExitSandboxTimeout, Msg: fmt.Sprintf("sandbox: killed: the timeout (%s) elapsed; every process in the sandbox was killed", spec.Limits.Wall)}
	case sandbox.LimitMemory:
		msg := fmt.Sprintf("sandbox: killed: the memory limit (%s) was reached", units.Size(spec.Limits.Memory))
		// The hint only when the workspace writes are a real part of
		// the limit: a plain memory hog should not be told about them.
		if tempInMemory && tempCS != "" && spec.ChangeSetSize > 0 && res.ChangeSetWritten {
			msg += "; what the command wrote to the workspace counts against it (the throw-away change set is in memory): pass --changeset DIR to write it to disk"
		} else if tempInMemory && tempCS != "" {
			if n := treeBytes(tempCS); n >= spec.Limits.Memory/10 {
				msg += fmt.Sprintf("; the %s the command wrote to the workspace count against it (the throw-away change set is in memory, in %s): pass --changeset DIR to write them to disk", units.Size(n).Approx(), memScratch)
			}
		}
		return &ExitError{Code: ExitSandboxLimit, Msg: msg}
	case sandbox.LimitCPU, sandbox.LimitFileSize:
		return &ExitError{Code: ExitSandboxLimit, Msg: fmt.Sprintf("sandbox: killed: the %s limit was reached", res.Killed)}
	}
	if csFull {
		if res.Signal == 0 && res.ExitCode == 0 {
			// Writes were lost and the command did not say so: the run
			// fails rather than look complete.
			return &ExitError{Code: ExitSandboxLimit, Msg: csFullMsg}
		}
		fmt.Fprintln(a.Stderr, "fluffy: "+csFullMsg)
	}
	if res.Signal != 0 {
		return &ExitError{Code: 128 + res.Signal, Msg: fmt.Sprintf("sandbox: the command was killed by signal %d (%s)", res.Signal, syscall.Signal(res.Signal))}
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// treeBytes is the space the regular files under dir take (allocated
// blocks: a sparse file's holes take none; symlinks not followed; what
// cannot be read counts nothing).
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// upperChanges lists what an overlay upper directory changes over the
// workspace (internal/changeset reads it: whiteouts, opaque directories,
// no symlink followed).
func upperChanges(ctx context.Context, workspace, upper string) ([]changeset.Change, error) {
	cs, err := changeset.OpenUpper(upper, workspace)
	if err != nil {
		return nil, err
	}
	return cs.Changes(ctx)
}

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
