// Package sandboxrun owns the body of 'fluffy sandbox run': from what
// the command line and the caller's environment say (Request) to a
// finished run and what its result means (Outcome) — the sandbox spec
// from the configuration and the template, --env, the throw-away change
// set, the audit log's exec.start/exec.end, the egress proxy's place in
// the run, and in the sandbox server (Host) the sandbox built ahead for
// the next run and the audit logs kept open between runs.
//
// It links no sandbox backend and no egress proxy: the runtime and the
// proxy come in through Backends, which internal/wiring fills in with
// sandbox/native, sandbox/docker and netproxy. So the CLI, which must not
// link those, can use this package's types (Request, Outcome, Host),
// while the sandbox server and the CLI's in-process fallback run the one
// same Run; and its tests run it on a fake runtime.
package sandboxrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/units"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// Exit statuses of 'fluffy sandbox run' besides the command's own and
// 128+signal. Documented in docs/sandbox.md.
const (
	ExitLimit    = 123 // a resource limit (memory, CPU, file size) killed the command
	ExitTimeout  = 124 // the wall-clock timeout killed the command
	ExitSetup    = 125 // the sandbox could not be set up; nothing ran
	ExitNotFound = 127 // the command was not found inside the sandbox
)

// Request is one 'fluffy sandbox run': its flags as given on the command
// line (empty: not given, the configuration decides) and the caller's
// environment and standard streams.
type Request struct {
	// User is the caller: configuration, environment, working directory.
	User *userenv.Env
	// Argv is the command to run.
	Argv []string
	// Template names the sandbox template (--template).
	Template string
	// Workspace is mounted read-only under an overlay (--workspace;
	// default: the working directory); NoWorkspace mounts none.
	Workspace   string
	NoWorkspace bool
	// ChangeSet receives the writes to the workspace (--changeset);
	// empty: a throw-away one, removed after the run.
	ChangeSet string
	// Timeout and Memory override sandbox.timeout and sandbox.memory
	// (units.ParseDuration, units.ParseSize).
	Timeout, Memory string
	// Env sets KEY=VALUE inside, or passes the caller's KEY (--env).
	Env []string
	// AllowDegraded runs on a host that lacks a protection.
	AllowDegraded bool
	// Quiet prints no warnings about weaker limits.
	Quiet bool
	// Runtime names the backend (--runtime; default sandbox.runtime).
	Runtime string
	// Net is none or proxy (--net; default from the template);
	// AllowHosts and EgressLog go with proxy.
	Net        string
	AllowHosts []string
	EgressLog  string
	// Trace, when set, receives the time each stage of the set-up took.
	Trace io.Writer
	// Stdin, Stdout and Stderr are the command's; Stderr also gets the
	// egress proxy's refusals.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Observer, when set, is told about the execution instead of the
	// audit log.
	Observer sandbox.Observer
	// Host is the sandbox server this run is served in; nil in a fluffy
	// process of its own.
	Host *Host
	// Early, when set, is given the outcome as soon as it is recorded,
	// before the sandbox is torn down (the sandbox server answers its
	// caller then); Run returns after the tear-down.
	Early func(Outcome, error)
}

// Reason says why a run ended as it did.
type Reason int

const (
	// ReasonExit: the command exited by itself (Code is its status).
	ReasonExit Reason = iota
	// ReasonSignal: a signal killed the command (Code is 128+signal).
	ReasonSignal
	// ReasonLimit: a resource limit killed it, or the throw-away change
	// set filled up and the command did not fail by itself (ExitLimit).
	ReasonLimit
	// ReasonTimeout: the wall-clock timeout killed it (ExitTimeout).
	ReasonTimeout
	// ReasonSetup: the sandbox could not be set up; nothing ran
	// (ExitSetup).
	ReasonSetup
	// ReasonNotFound: the command was not found inside the sandbox
	// (ExitNotFound).
	ReasonNotFound
	// ReasonInterrupted: a signal to fluffy (Ctrl-C, a kill) ended the
	// run (Code is 128+that signal).
	ReasonInterrupted
)

var reasonNames = [...]string{"exit", "signal", "limit", "timeout", "setup", "not-found", "interrupted"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Outcome is what a run means to its caller.
type Outcome struct {
	Reason Reason
	// Code is the exit status of 'fluffy sandbox run'.
	Code int
	// Msg, when not empty, says why (the CLI prints "fluffy: " + Msg).
	Msg string
	// Notes are warnings and remarks, one line each, printed before Msg
	// ("fluffy: " + note).
	Notes []string
}

// Backends are the parts of a run that link a sandbox backend or the
// egress proxy (internal/wiring provides them).
type Backends struct {
	// Runtime returns the runtime r names and a function releasing it.
	Runtime func(ctx context.Context, r RuntimeRequest) (sandbox.Runtime, func(), error)
	// Egress starts the egress proxy of one run with --net proxy.
	Egress func(ctx context.Context, r EgressRequest) (Egress, error)
}

// RuntimeRequest is the runtime a run asks for.
type RuntimeRequest struct {
	User *userenv.Env
	// Name is native, docker, podman or auto (empty: native).
	Name          string
	Template      string
	Image         string
	AllowDegraded bool
	Trace         io.Writer
	// Host, when set, holds the sandbox server's shared native runtime.
	Host *Host
}

// EgressRequest is the egress proxy a run asks for.
type EgressRequest struct {
	User       *userenv.Env
	Net        config.Net
	Template   string
	AllowHosts []string
	// Log, when set, receives one JSON line per request (--egress-log).
	Log string
	// Stderr is told about every refusal.
	Stderr io.Writer
	// Audit, when set, records every request (nil: an Observer stands
	// in for the audit log).
	Audit *Recorder
}

// Egress is a running egress proxy.
type Egress interface {
	// Socket is the proxy's unix socket, mounted into the sandbox.
	Socket() string
	// Env is the proxy's variables for the command (HTTP_PROXY...).
	Env() []string
	// Close stops the proxy and removes its socket.
	Close()
}

// EgressMounts is an Egress that gives the sandbox files besides its
// socket: the certificates to trust when the proxy terminates TLS to
// swap secrets in.
type EgressMounts interface {
	Mounts() []sandbox.Mount
}

// Runner runs 'fluffy sandbox run' on its backends.
type Runner struct {
	Backends Backends
}

// run is one Run under way.
type run struct {
	req     Request
	runtime string
	spec    sandbox.Spec
	// tempCS is the throw-away change set's upper directory ("" with
	// --changeset or no workspace); tempInMemory: it is in memory.
	tempCS       string
	tempInMemory bool
	// ahead: the sandbox server's native runtime, which builds the next
	// run's sandbox ahead (Host.prepareNext).
	ahead bool
}

// Run runs req's command in a sandbox and returns what its result means.
// An error is the caller's mistake (it wraps userenv.ErrUsage) or the
// configuration's; every failure of the sandbox itself is an Outcome.
func (r *Runner) Run(ctx context.Context, req Request) (Outcome, error) {
	u := req.User
	l, err := u.Config()
	if err != nil {
		return Outcome{}, err
	}
	c := l.Config.Sandbox
	tname := req.Template
	if tname == "" {
		tname = c.Template
	}
	tpl, err := sandbox.TemplateByName(tname)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", userenv.ErrUsage, err)
	}
	// Every execution is recorded in the audit log before it starts and
	// before its result is used; so is every egress request. The log is
	// opened at once, beside the rest of the set-up: a process's first
	// open is its slowest (SQLite cold, the signature tables). Close
	// waits for an open under way.
	observer := req.Observer
	var rec *Recorder
	if observer == nil {
		rec = newRecorder(ctx, u, req.Host, tpl.Name)
		defer rec.Close()
		observer = rec
		go func() { _, _ = rec.get() }()
	}
	x := &run{req: req, runtime: req.Runtime}
	if x.runtime == "" {
		x.runtime = c.Runtime
	}
	x.ahead = req.Host != nil && req.Early != nil && (x.runtime == "" || x.runtime == "native") && req.Trace == nil
	cleanup, err := x.buildSpec(c, tpl)
	defer cleanup()
	if err != nil {
		return Outcome{}, err
	}
	switch req.Net {
	case "":
	case string(sandbox.NetworkNone), string(sandbox.NetworkProxy):
		x.spec.Network = sandbox.Network(req.Net)
	default:
		return Outcome{}, fmt.Errorf("%w: --net %q: want none or proxy", userenv.ErrUsage, req.Net)
	}
	if x.spec.Network == sandbox.NetworkProxy {
		if x.spec.Seccomp == "standard" {
			// The forwarder is reached over TCP on loopback.
			x.spec.Seccomp = "standard-net"
		}
		eg, err := r.Backends.Egress(ctx, EgressRequest{User: u, Net: l.Config.Net, Template: tpl.Name,
			AllowHosts: req.AllowHosts, Log: req.EgressLog, Stderr: req.Stderr, Audit: rec})
		if err != nil {
			return Outcome{}, err
		}
		defer eg.Close()
		x.spec.ProxySocket = eg.Socket()
		// The proxy variables first: a later --env of the same name wins.
		base := len(u.SandboxEnv())
		x.spec.Env = append(append(x.spec.Env[:base:base], eg.Env()...), x.spec.Env[base:]...)
		if m, ok := eg.(EgressMounts); ok {
			x.spec.Mounts = append(x.spec.Mounts, m.Mounts()...)
		}
	} else if len(req.AllowHosts) > 0 || req.EgressLog != "" {
		return Outcome{}, fmt.Errorf("%w: --allow-host and --egress-log need --net proxy", userenv.ErrUsage)
	} else if rec != nil {
		rec.closeAtEnd = true
	}

	rt, release, err := r.Backends.Runtime(ctx, RuntimeRequest{User: u, Name: x.runtime, Template: tpl.Name, Image: c.Image,
		AllowDegraded: req.AllowDegraded || c.AllowDegraded, Trace: req.Trace, Host: req.Host})
	if err != nil {
		if errors.Is(err, userenv.ErrUsage) {
			return Outcome{}, err
		}
		return Outcome{Reason: ReasonSetup, Code: ExitSetup, Msg: "sandbox: " + err.Error()}, nil
	}
	defer release()
	if req.Early == nil || req.Host == nil {
		res, err := sandbox.Observe(rt, observer).Run(ctx, x.spec)
		return x.result(ctx, res, err)
	}
	return x.runEarly(ctx, rt, observer)
}

// runEarly runs in the sandbox server: the caller is answered as soon as
// the outcome is recorded; the sandbox is torn down after (runEarly
// returns then, and the deferred clean-up runs).
func (x *run) runEarly(ctx context.Context, rt sandbox.Runtime, observer sandbox.Observer) (Outcome, error) {
	type result struct {
		res sandbox.Result
		err error
	}
	reported, final := make(chan result, 1), make(chan result, 1)
	run := sandbox.ObserveReported(rt, observer, func(res sandbox.Result, err error) { reported <- result{res, err} })
	go func() {
		res, err := run.Run(ctx, x.spec)
		final <- result{res, err}
	}()
	rep := <-reported
	o, err := x.result(ctx, rep.res, rep.err)
	x.req.Early(o, err)
	fin := <-final
	if fin.err != nil && rep.err == nil {
		x.req.Host.logger.Warn("sandbox: after the reply", "err", fin.err) // the caller is gone
	}
	if x.ahead && fin.err == nil && (x.tempCS != "" || x.spec.Workspace == "") && x.spec.Network != sandbox.NetworkProxy {
		// The next run like this one finds its sandbox built.
		x.req.Host.prepareNext(x.req.User, rt, x.runtime, x.spec)
	}
	return o, err
}

// buildSpec sets x.spec from the configuration, the template and the
// flags, making the throw-away change set if the run needs one. cleanup
// removes it; it is never nil.
func (x *run) buildSpec(c config.Sandbox, tpl sandbox.Template) (cleanup func(), err error) {
	req, u := x.req, x.req.User
	cleanup = func() {}
	x.spec = sandbox.Spec{
		Argv:    req.Argv,
		Env:     u.SandboxEnv(),
		TmpSize: int64(c.TmpSize),
		Limits: sandbox.Limits{
			Wall:   time.Duration(c.Timeout),
			Memory: int64(c.Memory),
			Pids:   c.Pids,
			Output: int64(c.OutputLimit),
		},
		Stdin:  req.Stdin,
		Stdout: req.Stdout,
		Stderr: req.Stderr,
	}
	spec := &x.spec
	if req.Timeout != "" {
		d, err := units.ParseDuration(req.Timeout)
		if err != nil {
			return cleanup, fmt.Errorf("%w: --timeout: %w", userenv.ErrUsage, err)
		}
		spec.Limits.Wall = time.Duration(d)
	}
	if req.Memory != "" {
		s, err := units.ParseSize(req.Memory)
		if err != nil {
			return cleanup, fmt.Errorf("%w: --memory: %w", userenv.ErrUsage, err)
		}
		spec.Limits.Memory = int64(s)
	}
	env, err := envFlags(u, req.Env)
	if err != nil {
		return cleanup, err
	}
	spec.Env = append(spec.Env, env...)
	if tpl.Workspace && !req.NoWorkspace {
		ws := req.Workspace
		if ws == "" {
			ws = u.Cwd
		}
		ws = u.Abs(ws)
		spec.Workspace = ws
		spec.Dir = ws
		if u.Cwd == ws || strings.HasPrefix(u.Cwd, ws+"/") {
			spec.Dir = u.Cwd
		}
		cs := req.ChangeSet
		if cs == "" {
			dir, err := x.throwaway(ws)
			if err != nil {
				return cleanup, err
			}
			cleanup = func() { os.RemoveAll(dir) }
			cs = filepath.Join(dir, "upper")
			x.tempCS = cs
		}
		spec.ChangeSet = u.Abs(cs)
	} else if req.Workspace != "" || req.ChangeSet != "" {
		if !req.NoWorkspace {
			return cleanup, fmt.Errorf("%w: template %s mounts no workspace; drop --workspace/--changeset", userenv.ErrUsage, tpl.Name)
		}
	}
	tpl.Apply(spec)
	if req.NoWorkspace {
		spec.Workspace, spec.ChangeSet = "", ""
	}
	masks, err := u.SandboxMasks(spec.Workspace)
	if err != nil {
		return cleanup, err
	}
	spec.Mounts = append(spec.Mounts, masks...)
	spec.Mounts = append(spec.Mounts, u.ToolchainMounts(spec.Workspace)...)
	// The template's build caches, as in a session's sandboxes, with the
	// person's own caches read-only beside them.
	if cd := u.CacheDir(); cd != "" && spec.Workspace != "" {
		if err := tpl.ApplyCaches(spec, sandbox.CacheRoot(cd, spec.Workspace), u.UserCaches(spec.Workspace)); err != nil {
			return cleanup, err
		}
		// --env still wins over the caches' variables.
		spec.Env = append(slices.DeleteFunc(spec.Env, func(kv string) bool {
			k, _, _ := strings.Cut(kv, "=")
			return slices.ContainsFunc(env, func(f string) bool { return strings.HasPrefix(f, k+"=") })
		}), env...)
	}
	return cleanup, nil
}

// throwaway returns the directory of the run's throw-away change set on
// workspace ws: in the sandbox server the one a sandbox was built ahead
// on (Host.prepareNext), if it is for this run, else a new one.
func (x *run) throwaway(ws string) (string, error) {
	dir, inMemory, ok := "", false, false
	if x.ahead {
		dir, inMemory, ok = x.req.Host.takeScratch(scratchKey(x.req.User, x.runtime, ws))
	}
	if !ok {
		var err error
		if dir, inMemory, err = throwawayChangeSet(x.req.User, x.runtime); err != nil {
			return "", err
		}
	}
	x.tempInMemory = inMemory
	if inMemory && x.spec.Limits.Memory > 0 {
		// Kept inside the sandbox, bounded by the memory limit: an
		// RLIMIT_AS fallback does not count tmpfs pages, and the host's
		// /dev/shm is sized to all of RAM.
		x.spec.ChangeSetSize = x.spec.Limits.Memory
	}
	return dir, nil
}

// envFlags turns --env KEY=VALUE and --env KEY (the caller's value) into
// the command's variables.
func envFlags(u *userenv.Env, flags []string) ([]string, error) {
	var env []string
	for _, e := range flags {
		k, v, ok := strings.Cut(e, "=")
		if k == "" {
			return nil, fmt.Errorf("%w: --env %q: want KEY=VALUE or KEY", userenv.ErrUsage, e)
		}
		if !ok {
			hv, found := u.Getenv(k)
			if !found {
				return nil, fmt.Errorf("%w: --env %s: not set in your environment", userenv.ErrUsage, k)
			}
			v = hv
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// Interrupted is the cause of a command's context when a signal to
// fluffy cancelled it (Ctrl-C, kill): the command then exits
// 128+Signal, as a shell does.
type Interrupted struct{ Signal syscall.Signal }

func (e *Interrupted) Error() string { return "interrupted by " + sandboxd.SignalName(e.Signal) }
