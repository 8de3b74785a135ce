// Package sandbox owns how fluffy runs a command it does not trust: the
// backend-neutral Runtime interface, the Spec of one execution and its
// Result, the built-in templates, the seccomp profiles (as data, assembled
// to BPF for the native backend and exported as Docker JSON for the
// container backend), host facility reports, and the reading of a change
// set (an overlay upper directory) back into added, modified and deleted
// files.
//
// Backends live in sub-packages (native; docker later) and implement
// Runtime. The adversarial suite in sandboxtest runs against every backend.
//
// Nothing here trusts the sandboxed process: every field of Result that
// comes from inside (output, status) is bounded and treated as data.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Runtime runs one Spec to completion. Run returns a Result whenever the
// sandbox was set up and the command started, whatever the command's
// outcome (non-zero exit, signal, limit, timeout); it returns an error only
// when the sandbox could not be set up or the command could not start. Such
// an error wraps ErrSetup, and ErrUnavailable when a host facility is
// missing. Run kills everything it started before it returns, on every
// path, and leaves no process, mount or temporary directory behind.
// Cancelling ctx kills the execution; the Result then says LimitTime only
// when Spec.Limits.Wall elapsed.
type Runtime interface {
	Run(ctx context.Context, spec Spec) (Result, error)
}

// Starter is the optional ability to keep a sandbox alive and execute
// several commands in it (pre-warming). Backends that cannot do it simply
// do not implement it; callers fall back to Runtime.Run.
type Starter interface {
	Start(ctx context.Context, spec Spec) (Instance, error)
}

// Instance is a started sandbox. Exec runs argv in it with the spec's
// environment and limits; Close kills everything left and releases the
// sandbox; it is safe to call more than once.
type Instance interface {
	Exec(ctx context.Context, argv []string) (Result, error)
	Close() error
}

// Network says what the sandboxed process may reach.
type Network string

// Network modes.
const (
	// NetworkNone gives the sandbox a network namespace with no
	// interfaces but an unconfigured loopback.
	NetworkNone Network = "none"
	// NetworkProxy keeps that namespace (loopback only) and adds the
	// egress proxy: Spec.ProxySocket is mounted at ProxySocketPath and a
	// forwarder inside listens on ProxyListen (see internal/netproxy).
	// The caller runs the proxy and sets the proxy variables in Env.
	NetworkProxy Network = "proxy"
)

// Where the egress proxy appears inside a sandbox with NetworkProxy.
const (
	ProxySocketPath = "/run/fluffy/egress.sock"
	ProxyListen     = "127.0.0.1:3128"
	// CABundlePath is where a sandbox finds the certificates it trusts
	// when the proxy terminates its TLS to swap secrets in (the system's
	// roots and the proxy's own CA), mounted only then.
	CABundlePath = "/run/fluffy/ca-bundle.pem"
)

// Mount is an extra bind mount of a host path into the sandbox.
type Mount struct {
	// Source is an absolute host path.
	Source string
	// Target is the absolute path inside; empty means Source.
	Target string
	// Writable allows writes (through to the host: use sparingly).
	Writable bool
}

// Limits bound one execution. A zero field means "no limit of this kind"
// except where a backend documents a floor.
type Limits struct {
	Wall      time.Duration // wall-clock time, from start to kill
	CPU       time.Duration // CPU time (RLIMIT_CPU, whole seconds)
	Memory    int64         // bytes (cgroup memory, else RLIMIT_AS)
	Pids      int           // processes and threads (cgroup pids, else RLIMIT_NPROC)
	FileSize  int64         // largest file written, bytes (RLIMIT_FSIZE)
	OpenFiles int           // file descriptors (RLIMIT_NOFILE)
	Output    int64         // captured bytes of stdout and of stderr, each
}

// Spec describes one execution. Nothing from the host environment enters
// the sandbox unless it is listed in Env.
type Spec struct {
	// Argv is the command; Argv[0] is looked up in PATH from Env when it
	// has no slash. Required.
	Argv []string
	// Env is the complete environment, "KEY=value".
	Env []string
	// Dir is the working directory inside; empty means Workspace, or /.
	Dir string
	// Workspace is a host directory mounted read-only as the lower layer
	// of an overlay at the same path inside; empty means none.
	Workspace string
	// ChangeSet is the host directory that receives every write to the
	// workspace (the overlay's upper layer). Required with Workspace.
	ChangeSet string
	// ChangeSetSize, when above zero, makes the change set a throw-away
	// one kept in memory inside the sandbox (native runtime): a tmpfs of
	// this many bytes over ChangeSet's parent directory, in the
	// sandbox's mount namespace only, gone with the sandbox. The host's
	// ChangeSet directory stays empty; writes to the workspace beyond
	// the size fail with ENOSPC (Result.Hit has LimitChangeSet), and
	// they are charged to the sandbox's memory cgroup when it has one.
	// Backends that cannot do it ignore it (the change set is then an
	// ordinary directory).
	ChangeSetSize int64
	// WorkspaceReadOnly mounts the workspace as the change set shows it
	// (ChangeSet over Workspace) read-only: every write to it fails
	// (EROFS) and nothing reaches the change set. For a confined command
	// (a skill's run), which proposes lasting writes otherwise.
	WorkspaceReadOnly bool
	// Mounts are extra bind mounts, read-only unless marked Writable.
	Mounts []Mount
	// Image, when set, is the container image the sandbox starts from in
	// place of the runtime's own (a skill's image, docs/skills.md). Only
	// the container runtimes honour it: the native runtime refuses a
	// spec that names one (ErrInvalidSpec).
	Image string
	// TmpSize is the size of the sandbox's private /tmp (tmpfs), bytes.
	TmpSize int64
	// Network is the network mode; empty means NetworkNone.
	Network Network
	// ProxySocket is the host path of the egress proxy's unix socket;
	// required with NetworkProxy, ignored otherwise.
	ProxySocket string
	// Seccomp names the seccomp profile (see Profiles); empty means
	// "standard".
	Seccomp string
	// Limits bound the execution.
	Limits Limits
	// Stdin is the command's standard input; nil means /dev/null. It is
	// always passed through a pipe, never as the caller's terminal.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive the output live as well, up
	// to Limits.Output each.
	Stdout, Stderr io.Writer
	// Scratch, when set, is memory outside the Go heap for what may hold
	// a secret's value: a runtime that supports it (the native one's
	// direct and ahead starts) makes the C strings of Env there and
	// captures the output there (Result.Stdout and Stderr then point
	// into it, when Limits.Output bounds them). Its holder zeroes it
	// after the run, so the caller copies what it keeps (redacted).
	Scratch Scratch
	// Live hands Stdout and Stderr all the output, unbounded, and keeps
	// none in the Result: for a long-lived process whose output is a
	// stream its reader bounds (a plugin's MCP server), where a capture
	// would grow for the process's whole life.
	Live bool
	// Yield, when set, lets another sandbox have the change set: two
	// overlays on one upper directory are never mounted at once, so a
	// run that needs this run's change set waits for it to end, and the
	// runtime calls Yield (once, from another goroutine) to ask for that
	// end. A long-lived sandbox on a session's change set (a plugin's
	// server) sets it and ends its run soon after. Backends without the
	// rule (containers) ignore it.
	Yield func()
}

// Scratch hands out memory outside the Go heap (*secret.Arena).
type Scratch interface {
	// Bytes returns n zeroed bytes, or nil when it cannot: the runtime
	// then uses the heap.
	Bytes(n int) []byte
}

// Validate checks the parts of a spec that do not depend on the backend.
func (s *Spec) Validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if s.Workspace != "" && s.ChangeSet == "" {
		return fmt.Errorf("%w: a workspace needs a change set directory for its writes", ErrInvalidSpec)
	}
	for _, p := range []string{s.Workspace, s.ChangeSet, s.Dir} {
		if p != "" && !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%w: %q is not an absolute path", ErrInvalidSpec, p)
		}
	}
	for _, m := range s.Mounts {
		if !strings.HasPrefix(m.Source, "/") || (m.Target != "" && !strings.HasPrefix(m.Target, "/")) {
			return fmt.Errorf("%w: mount %q: paths must be absolute", ErrInvalidSpec, m.Source)
		}
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%w: environment entry %q is not KEY=value", ErrInvalidSpec, e)
		}
	}
	switch s.Network {
	case "", NetworkNone:
	case NetworkProxy:
		if !strings.HasPrefix(s.ProxySocket, "/") {
			return fmt.Errorf("%w: network mode %q needs the egress proxy's socket (an absolute path)", ErrInvalidSpec, s.Network)
		}
	default:
		return fmt.Errorf("%w: unknown network mode %q", ErrInvalidSpec, s.Network)
	}
	if s.Seccomp != "" {
		if _, err := ProfileByName(s.Seccomp); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
	}
	return nil
}

// Limit names a limit that was reached.
type Limit string

// Limits a Result can report.
const (
	LimitTime     Limit = "time"      // Limits.Wall elapsed; the tree was killed
	LimitCPU      Limit = "cpu"       // Limits.CPU used up (SIGXCPU/SIGKILL)
	LimitMemory   Limit = "memory"    // the memory limit was hit (OOM kill)
	LimitPids     Limit = "pids"      // a fork or clone was refused
	LimitFileSize Limit = "file-size" // a write beyond Limits.FileSize (SIGXFSZ)
	LimitTmp      Limit = "tmp"       // /tmp filled up (ENOSPC)
	// LimitChangeSet: a throw-away change set in memory
	// (Spec.ChangeSetSize) filled up (ENOSPC).
	LimitChangeSet Limit = "changeset"
	LimitOutput    Limit = "output" // output was truncated
)

// Result is the outcome of a command that ran.
type Result struct {
	// ExitCode is the command's exit status, or -1 when a signal ended it.
	ExitCode int
	// Signal is the signal that ended the command, or 0.
	Signal int
	// Killed names the limit whose enforcement ended the command, or "".
	Killed Limit
	// Hit lists every limit reached during the run (a refused fork, a full
	// /tmp, truncated output), including Killed.
	Hit []Limit
	// ChangeSetWritten says the command wrote to a throw-away change set
	// kept in memory (Spec.ChangeSetSize), which went with the sandbox.
	ChangeSetWritten bool
	// Stdout and Stderr are the captured output, at most Limits.Output
	// bytes each, followed by TruncationMarker when cut.
	Stdout, Stderr []byte
	// Duration is the wall time from start to the end of the command.
	Duration time.Duration
	// Setup is the time spent before the command started.
	Setup time.Duration
	// StartMode names how the sandbox was started (the native runtime's
	// start modes: ahead, direct, vfork, stage-1, exec), "" where the
	// runtime has none (containers).
	StartMode string
	// Warnings describe protections that were weaker than asked (degraded
	// runs, limits enforced by a fallback). Show them to the user.
	Warnings []string
}

// HitLimit reports whether l is among the limits reached.
func (r *Result) HitLimit(l Limit) bool {
	for _, h := range r.Hit {
		if h == l {
			return true
		}
	}
	return false
}

// TruncationMarker follows captured output that was cut at the limit.
const TruncationMarker = "\n[fluffy: output truncated]\n"

// Errors callers branch on.
var (
	// ErrInvalidSpec: the spec itself is wrong; fix the caller.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrCommandNotFound: the command's program is not on the sandbox's
	// PATH; always with ErrInvalidSpec.
	ErrCommandNotFound = errors.New("command not found")
	// ErrSetup: the sandbox could not be set up or the command could not
	// start; nothing ran.
	ErrSetup = errors.New("sandbox setup failed")
	// ErrUnavailable: the host lacks a facility the sandbox needs. Errors
	// wrapping it are *UnavailableError.
	ErrUnavailable = errors.New("sandbox facility unavailable")
)

// UnavailableError lists the missing facilities, each with how to get it.
type UnavailableError struct {
	Missing []Facility
	// Degradable says a degraded run (--allow-degraded) would run
	// without the missing facilities; only then does the message offer
	// it (a missing container engine or user namespaces leave nothing
	// to run with).
	Degradable bool
}

func (e *UnavailableError) Error() string {
	var b strings.Builder
	b.WriteString("this host lacks what the sandbox needs:")
	for _, f := range e.Missing {
		fmt.Fprintf(&b, "\n  - %s: %s", f.Name, f.Detail)
		if f.Fix != "" {
			fmt.Fprintf(&b, "\n    fix: %s", f.Fix)
		}
	}
	if e.Degradable {
		b.WriteString("\nRun with --allow-degraded (config sandbox.allow_degraded) to run with what exists, without these protections.")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnavailable) and errors.Is(err, ErrSetup) hold.
func (e *UnavailableError) Is(target error) bool {
	return target == ErrUnavailable || target == ErrSetup
}

// Facility is one host ability a backend uses, as detected.
type Facility struct {
	// Name is short and stable: "userns", "landlock", "seccomp",
	// "overlay-userns", "cgroup".
	Name string `json:"name"`
	// Available is true when the facility works here.
	Available bool `json:"available"`
	// Required is true when the backend refuses to run without it (unless
	// degraded runs are allowed).
	Required bool `json:"required"`
	// Detail says what was found ("ABI 7", "cgroup v1 memory+pids").
	Detail string `json:"detail"`
	// Fix says how to get it when it is missing.
	Fix string `json:"fix,omitempty"`
	// Version is a numeric level where one exists (the landlock ABI).
	Version int `json:"version,omitempty"`
}

// InitBinaryName is the file name of the small sandbox init binary,
// installed beside the fluffy binary.
const InitBinaryName = "fluffy-sandbox-init"

// SystemDirs are the host directories every native sandbox shows
// read-only (nsinit binds the same list): a program found below one needs
// no mount of its own.
func SystemDirs() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
}

// DefaultPath is the sandbox's PATH when the user's is unknown.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseEnv is the environment every sandboxed command starts from, the
// agent's and 'fluffy sandbox run's alike: the user's PATH (so the user's
// tools — go, cargo, pytest — are found where the user finds them;
// DefaultPath when path is empty), HOME=/tmp and LANG=C.UTF-8. Nothing
// else of the user's environment goes in.
func BaseEnv(path string) []string {
	if path == "" {
		path = DefaultPath
	}
	return []string{"PATH=" + path, "HOME=/tmp", "LANG=C.UTF-8"}
}
