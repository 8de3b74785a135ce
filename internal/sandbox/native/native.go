// Package native is fluffy's Linux sandbox backend. It runs each command
// under a re-executed copy of the fluffy binary acting as a hidden init
// (see InitMain): PID 1 of new user, mount, PID, network, IPC, UTS and
// cgroup namespaces, in a minimal root (system directories read-only, fresh
// /proc, a tty-less /dev, a private tmpfs /tmp, the workspace as an overlay
// whose upper layer is the change set) reached with pivot_root; then every
// capability is dropped, no_new_privs set, a landlock ruleset and a seccomp
// filter applied, rlimits set, and the command started in a session of its
// own with a cgroup (memory, pids) where the host allows one.
//
// The init is package nsinit. Go cannot run code between fork and exec,
// so it is a program of its own: cmd/fluffy-sandbox-init, a small binary
// installed beside fluffy (it starts in a fraction of the time the whole
// fluffy binary takes), or, when that is absent, the fluffy binary itself,
// which dispatches to InitMain before anything else when argv[0] is
// InitArg0. The init is cloned with vfork semantics although it gets a
// new user namespace (vfork_linux.go: the child writes its own id maps),
// so no run copies this process's address space, however big its heap.
// Where that is not possible the init is started by os/exec, and a
// caller with a big heap then starts the small init as stage 1 instead
// (nsinit.Stage1Main): without namespaces, so that its own clone is a
// cheap vfork, and stage 1 clones the namespaced init from its small
// address space (Runtime.useStage1 says when). The seccomp program is
// assembled by the parent (package sandbox) and loaded by the init as raw
// BPF; landlock is applied with raw system calls; so the init needs no
// library beyond golang.org/x/sys.
package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// Options configure a Runtime.
type Options struct {
	// Self is the fluffy binary, re-executed as the init when Init is
	// empty; required.
	Self string
	// Init is the small init binary (cmd/fluffy-sandbox-init). Empty
	// means the one installed beside Self (InitBinaryName), if any, else
	// Self itself.
	Init string
	// AllowDegraded runs without the facilities the host lacks instead of
	// refusing (each run's Result.Warnings says what is missing).
	AllowDegraded bool
	// Logger receives diagnostics; nil means none.
	Logger *slog.Logger
	// Facilities, when set, replaces host detection (tests use it to
	// pretend a facility is missing).
	Facilities func() []sandbox.Facility
	// Trace, when set, receives after each run a table of the time every
	// stage took, in the parent and in the init (fluffy sandbox run
	// --trace writes it to stderr).
	Trace io.Writer
	// Spares is how many sandboxes the runtime keeps started ahead of
	// their requests (spare.go): each an init already in its new
	// namespaces (and its cgroup), its runtime up, waiting for its
	// configuration. A run takes one that fits (any spec but those with
	// network mode proxy; an Instance never does) and so skips the
	// clone, the exec and the init's runtime start; the pool is refilled
	// in the background, shaped like the last spec. 0 starts every
	// sandbox on demand. Prepare starts the first spares. A runtime with
	// spares must be closed (Close): it owns their processes and
	// cgroups. A spare's sandbox is the same as one started on demand:
	// the root, landlock, seccomp, rlimits and limits are set up for the
	// request, after its configuration arrives. Run still tears its
	// sandbox down before returning (RunEarly hands the result over
	// before that).
	Spares int
	// NoNetNSPool makes every direct start create its network namespace
	// in its clone, never ahead (netns_linux.go).
	NoNetNSPool bool
	// NoDirect starts every sandbox through the Go init, never directly
	// (direct_linux.go); tests and benchmarks compare both ways. With
	// Spares above zero runs take spares (through the Go init) instead.
	NoDirect bool
}

// Runtime is the native backend. It is safe for concurrent use.
type Runtime struct {
	opts Options

	once sync.Once
	facs []sandbox.Facility
	cgl  cgroupLayout
	mu   sync.Mutex // guards bpf
	bpf  map[string][]byte
	uid  int
	gid  int
	// stage1Min is the resident anonymous memory of this process from
	// which the init is cloned by stage 1 (see useStage1).
	stage1Min int64
	// noVfork starts the init with os/exec (tests compare both ways).
	noVfork bool
	// pool holds the spare sandboxes (Options.Spares).
	pool sparePool
	// idmap is the user namespace of direct starts' idmapped trees.
	idmap struct {
		once sync.Once
		fd   int
		err  error
	}
	// reaper is the memfd of direct starts' reaper.
	reaper struct {
		once sync.Once
		f    *os.File
		err  error
	}
	// netns holds a network namespace made ahead for the next direct
	// start (netns_linux.go).
	netns netnsPool
	// ahead holds the sandbox built ahead of the next run
	// (PrepareNext).
	ahead aheadSlot
	// pid1Pause (tests) delays a direct start's PID 1 before it becomes
	// the reaper (directOpts).
	pid1Pause time.Duration
}

// initProcess is the started init (or stage 1).
type initProcess interface {
	Start() error
	Wait() error
	Pid() int
	Signal(syscall.Signal) error
}

// execProcess is an init started by os/exec.
type execProcess struct{ *exec.Cmd }

func (p execProcess) Pid() int                        { return p.Process.Pid }
func (p execProcess) Signal(sig syscall.Signal) error { return p.Process.Signal(sig) }

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a native Runtime.
func New(opts Options) (*Runtime, error) {
	if opts.Self == "" {
		return nil, errors.New("native sandbox: Options.Self (the fluffy binary) is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Init == "" {
		opts.Init = opts.Self
		sib := filepath.Join(filepath.Dir(opts.Self), InitBinaryName)
		if fi, err := os.Stat(sib); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			opts.Init = sib
		}
	}
	return &Runtime{opts: opts, bpf: map[string][]byte{}, uid: os.Getuid(), gid: os.Getgid(), stage1Min: stage1MinAnon}, nil
}

// stage1MinAnon is the resident anonymous memory (heap, stacks, written
// data) of this process from which a run starts the small init as stage 1
// (nsinit.Stage1Main) instead of cloning the namespaced init itself. A
// clone with CLONE_NEWUSER cannot be a vfork (Go's child waits for its id
// maps), so it copies the page tables of every anonymous page and both
// processes then take copy-on-write faults: about 0.1 ms of CPU per MB
// (docs/benchmarks.md, the rows "the caller's heap" and "stage 1 forced"). Stage 1 is a vfork of this process plus a
// second start of the small Go runtime, a constant of about 3 ms of CPU:
// worth it only for a big process (a long-lived agent), not for the
// fluffy command (about 7 MB). Only when the init cannot be started by
// vfork (useStage1).
const stage1MinAnon = 32 << 20

// anonResident returns this process's resident memory that is not backed
// by a file (statm: resident - shared), or 0 when unknown.
func anonResident() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	res, err1 := strconv.ParseInt(f[1], 10, 64)
	shared, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || res < shared {
		return 0
	}
	return (res - shared) * int64(os.Getpagesize())
}

// useStage1 says whether this run starts the init through stage 1: the
// small init binary is installed (the fallback, this binary re-executed,
// would be a second large runtime start), the init enters its cgroup by
// being born in it (stage 1 is, and its child with it; a move after the
// start would miss the init stage 1 clones), this process clones with
// os/exec, not vfork (a vfork copies nothing, so stage 1 would only add
// a runtime start), and it is big enough for its clone to cost more than
// stage 1 (stage1Min; 0 forces stage 1).
func (r *Runtime) useStage1(cg *cgroup) bool {
	if r.opts.Init == r.opts.Self || (cg != nil && !cg.v2 && !r.cgl.v1Threads) {
		return false
	}
	if r.stage1Min <= 0 {
		return true
	}
	if vforkSupported && !r.noVfork {
		return false
	}
	return anonResident() >= r.stage1Min
}

// InitBinaryName is the file name of the small init binary that New looks
// for beside the fluffy binary.
const InitBinaryName = "fluffy-sandbox-init"

// InitPath returns the binary this Runtime starts as the sandbox init.
func (r *Runtime) InitPath() string { return r.opts.Init }

// SandboxUID is the host uid and gid that root's sandboxes run as (uid 0
// inside maps to it). It is an id of the sandboxes' own, not nobody
// (65534): any process of the same host uid may signal a sandbox's
// processes and, once they are dumpable (every execve makes them so),
// ptrace them and read their /proc entries (root, environ, fd), and
// nobody is what many daemons run as. 65525 is in the range that Debian
// reserves (65000–65533) and that systemd leaves unused (65520–65533):
// no account or dynamic service user gets it; it is below 65536, so it
// is mapped wherever fluffy runs as root of a container's usual 65536-id
// user namespace. docs/sandbox.md states it.
const SandboxUID = 65525

// hostIDs returns the host uid and gid that uid 0 inside maps to: the
// caller's own, or SandboxUID when the caller is root (so a sandbox never
// holds host root's file ownership and shares its host uid with nothing
// else).
func (r *Runtime) hostIDs() (int, int) {
	if r.uid == 0 {
		return SandboxUID, SandboxUID
	}
	return r.uid, r.gid
}

// Prepare does now what the first run would otherwise do first: look at
// the host (user namespaces, landlock, seccomp, where cgroups may be
// created). A short-lived caller such as the fluffy command can run it in
// a goroutine while it reads its configuration, taking it off the first
// run's path. It is safe to call more than once and concurrently with
// runs. With Options.Spares, it also starts the spare sandboxes (with a
// cgroup where the host has them) in the background.
func (r *Runtime) Prepare() {
	r.detect()
	r.refill(r.cgl.available)
}

func (r *Runtime) detect() {
	r.once.Do(func() {
		r.cgl = findCgroups()
		if r.opts.Facilities != nil {
			r.facs = r.opts.Facilities()
			return
		}
		r.facs = quickFacilities(r.cgl)
	})
}

func (r *Runtime) facility(name string) sandbox.Facility {
	for _, f := range r.facs {
		if f.Name == name {
			return f
		}
	}
	return sandbox.Facility{Name: name}
}

func (r *Runtime) seccompProgram(name string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.bpf[name]; ok {
		return p, nil
	}
	prof, err := sandbox.ProfileByName(name)
	if err != nil {
		return nil, err
	}
	p, err := prof.BPF()
	if err != nil {
		return nil, err
	}
	r.bpf[name] = p
	return p, nil
}

var _ sandbox.GatedRunner = (*Runtime)(nil)

// Run implements sandbox.Runtime.
func (r *Runtime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return r.RunGated(ctx, spec, nil)
}

// RunGated implements sandbox.GatedRunner: gate (when not nil) is called
// once the init is ready to start the command (root built, restrictions
// applied, cgroup joined), and the command starts only if it returns nil.
func (r *Runtime) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	return r.RunEarly(ctx, spec, gate, nil)
}

// RunEarly implements sandbox.EarlyRunner: RunGated, and early (when not
// nil) is given the command's result as soon as the init has reported
// it and the output has ended, while the sandbox is still being torn
// down (the init's exit, the namespaces, the cgroup and work directory):
// a caller can record the outcome meanwhile. The result lacks the
// output's bytes; a teardown failure after it is only in the error.
// Runs whose output cannot be awaited apart from the init's exit (the
// os/exec and stage-1 starts) report only at the end, as RunGated.
func (r *Runtime) RunEarly(ctx context.Context, spec sandbox.Spec, gate func() error, early func(sandbox.Result)) (sandbox.Result, error) {
	tr := &nsinit.Tracer{On: r.opts.Trace != nil}
	tr.Mark("start")
	var st nsinit.Status
	var before unix.Rusage
	if tr.On {
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &before)
	}
	res, err := r.run(ctx, spec, tr, &st, nil, gate, early, true)
	if tr.On {
		tr.Mark("cleaned up")
		// A spare's init started before the request: its marks from then
		// (its runtime's start) are not this run's.
		initMarks := slices.DeleteFunc(st.Marks, func(m nsinit.Mark) bool { return m.At < tr.Marks[0].At })
		direct := st.Stage == directStage
		writeTrace(r.opts.Trace, tr.Marks, initMarks, direct)
		writeCPU(r.opts.Trace, &before, st.CommandCPU, direct)
	}
	return res, err
}

// config turns spec into the init's configuration: the host's
// facilities (warnings for those missing go to res), the resolved paths,
// the change set made. The overlay's work directory (cfg.Work) is the
// caller's to make (makeWork).
func (r *Runtime) config(spec sandbox.Spec, tr *nsinit.Tracer, serve bool, res *sandbox.Result) (*nsinit.Config, error) {
	r.detect()
	if spec.Seccomp == "" {
		spec.Seccomp = "standard"
	}
	cfg := nsinit.Config{Protocol: nsinit.Protocol, Argv: spec.Argv, Env: spec.Env, TmpSize: spec.TmpSize, Dir: spec.Dir, Trace: tr.On, Serve: serve}
	if cfg.Dir == "" {
		cfg.Dir = "/"
		if spec.Workspace != "" {
			cfg.Dir = spec.Workspace
		}
	}

	// What the host offers, and what to do about what it lacks.
	var missing []sandbox.Facility
	need := func(name string) bool {
		f := r.facility(name)
		if f.Available {
			return true
		}
		missing = append(missing, f)
		return false
	}
	if !need("userns") {
		// Without user namespaces nothing below can be built.
		return nil, &sandbox.UnavailableError{Missing: missing}
	}
	if need("landlock") {
		cfg.Landlock = r.facility("landlock").Version
		cfg.LandlockNet = spec.Network == sandbox.NetworkNone || spec.Network == ""
	}
	if need("seccomp") {
		prog, err := r.seccompProgram(spec.Seccomp)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		cfg.Seccomp = prog
	}
	if spec.Workspace != "" && !need("overlay-userns") {
		cfg.WorkspaceRO = true
	}
	if len(missing) > 0 {
		if !r.opts.AllowDegraded {
			return nil, &sandbox.UnavailableError{Missing: missing}
		}
		for _, f := range missing {
			w := fmt.Sprintf("DEGRADED: running without %s (%s)", f.Name, f.Detail)
			if f.Name == "overlay-userns" {
				w += "; the workspace is mounted read-only and writes to it fail"
			}
			res.Warnings = append(res.Warnings, w)
			r.opts.Logger.Warn("sandbox degraded", "missing", f.Name, "detail", f.Detail)
		}
	}

	// Host paths, resolved so the init sees no symlinks.
	if spec.Workspace != "" {
		ws, err := resolveDir(spec.Workspace, "workspace")
		if err != nil {
			return nil, err
		}
		cfg.Workspace = ws
		if cfg.Dir == spec.Workspace {
			cfg.Dir = ws
		}
		if !cfg.WorkspaceRO {
			if err := os.MkdirAll(spec.ChangeSet, 0o755); err != nil {
				return nil, fmt.Errorf("%w: change set: %w", sandbox.ErrSetup, err)
			}
			up, err := resolveDir(spec.ChangeSet, "change set")
			if err != nil {
				return nil, err
			}
			if up == ws || strings.HasPrefix(up, ws+"/") || strings.HasPrefix(ws, up+"/") {
				return nil, fmt.Errorf("%w: the change set %s and the workspace %s must not contain each other", sandbox.ErrInvalidSpec, up, ws)
			}
			cfg.Upper = up
			cfg.UpperSize = max(spec.ChangeSetSize, 0)
			for _, p := range []string{ws, up} {
				if strings.ContainsAny(p, ",:\\\n") {
					return nil, fmt.Errorf("%w: %q: overlay paths may not contain , : \\ or newlines", sandbox.ErrInvalidSpec, p)
				}
			}
		}
	}
	for _, m := range spec.Mounts {
		src, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return nil, fmt.Errorf("%w: mount source: %w", sandbox.ErrSetup, err)
		}
		t := m.Target
		if t == "" {
			t = src
		}
		cfg.Mounts = append(cfg.Mounts, nsinit.MountSpec{Source: src, Target: filepath.Clean(t), Writable: m.Writable})
	}
	return &cfg, nil
}

func (r *Runtime) run(ctx context.Context, spec sandbox.Spec, tr *nsinit.Tracer, stOut *nsinit.Status, hook *serveHook, gate func() error, early func(sandbox.Result), useSpares bool) (res sandbox.Result, err error) {
	if err := spec.Validate(); err != nil {
		return res, err
	}
	cfgp, err := r.config(spec, tr, hook != nil, &res)
	if err != nil {
		return res, err
	}
	cfg := *cfgp
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	// Limits: a cgroup where the host allows it, rlimits always.
	lim := spec.Limits
	wantCg := r.wantsCgroup(lim)
	// A sandbox built ahead on this change set (ahead_linux.go): this
	// run takes it, or it goes (useAhead discards what does not fit).
	if a := r.claimAhead(cfg.Upper); a != nil {
		ac := cfg
		warnings := addRlimits(&ac, lim, wantCg)
		// An instance, a traced run or one through the egress proxy
		// never fits.
		if hook != nil || tr.On || spec.Network == sandbox.NetworkProxy {
			r.discardAheadLater(a)
		} else if r.useAhead(a, &ac, lim, wantCg) {
			res.Warnings = append(res.Warnings, warnings...)
			return r.runAhead(ctx, a, spec, res, gate, early, tr, stOut)
		}
	}
	if cfg.Upper != "" {
		work, err := makeWork(cfg.Upper)
		if err != nil {
			return res, err
		}
		cleanups = append(cleanups, func() { removeWork(work) })
		cfg.Work = work
		if strings.ContainsAny(work, ",:\\\n") {
			return res, fmt.Errorf("%w: %q: overlay paths may not contain , : \\ or newlines", sandbox.ErrInvalidSpec, work)
		}
	}

	proxyF, err := r.proxySocket(&cfg, spec)
	if err != nil {
		return res, err
	}
	if proxyF != nil {
		defer proxyF.Close()
	}
	tr.Mark("spec, facilities, work dir")
	if hook == nil && proxyF == nil && r.directOK(&cfg, wantCg) {
		return r.startDirect(ctx, &cfg, spec, res, early, gate, tr, stOut)
	}
	// A spare sandbox (Options.Spares) is taken when one fits: it brings
	// its own cgroup, into which this request's limits are written.
	spareable := useSpares && hook == nil && proxyF == nil && r.opts.Spares > 0
	var sp *sandboxProc
	refillNow := func() {}
	if spareable {
		// Whatever happens to this run, the pool is filled again, shaped
		// like this spec (as soon as the command's status is in, below,
		// so that the refill does not compete with this run's start).
		refill := sync.OnceFunc(func() { r.refill(wantCg) })
		defer refill()
		refillNow = refill
		sp = r.takeSpare(wantCg, lim.Memory, lim.Pids)
		if sp != nil {
			tr.Mark("spare taken")
		}
	}
	var cg *cgroup
	if sp != nil {
		cg = sp.cg
	} else if wantCg {
		cg, err = newCgroup(r.cgl, lim.Memory, lim.Pids)
		if err != nil {
			res.Warnings = append(res.Warnings, "no cgroup for this run: "+err.Error())
			cg = nil
		}
		tr.Mark("cgroup created")
	}
	res.Warnings = append(res.Warnings, addRlimits(&cfg, lim, cg != nil)...)
	cfg.LowerFD = r.lowerFD(&cfg)
	var stdin io.Reader
	if spec.Stdin != nil {
		stdin = spec.Stdin
		if f, ok := spec.Stdin.(*os.File); ok {
			// Never hand the sandbox the caller's terminal (TIOCSTI and
			// friends): always a pipe.
			stdin = struct{ io.Reader }{f}
		}
	}
	stdout := &capWriter{max: lim.Output, tee: spec.Stdout}
	stderr := &capWriter{max: lim.Output, tee: spec.Stderr}
	if sp != nil {
		// A spare's stdin is always a pipe: the init puts /dev/null in
		// its place when the request has none.
		cfg.Spare, cfg.NullStdin = true, stdin == nil
	}
	cfgMsg := nsinit.Frame(cfg.AppendBinary(nil))
	start := time.Now()
	fromSpare := sp != nil
	if sp != nil {
		// The spare has waited for its configuration since it started;
		// the request's writers take its output from here on.
		sp.connect(stdin, stdout, stderr)
		if err := sp.writeConfig(cfgMsg); err != nil {
			// It died after takeSpare looked (nothing of this request
			// reached it): start one as if there had been no spare.
			r.discardLater(sp)
			refillNow()
			return r.run(ctx, spec, tr, stOut, hook, gate, early, false)
		}
		tr.Mark("configuration sent to the spare")
	} else {
		// The configuration is written before the init starts (when the
		// pipe holds it), so the init reads it as soon as its runtime is
		// up and builds its root while this process joins it to the
		// cgroup and sends the idmapped trees.
		sp, err = r.launch(launchOpts{cg: cg, fdSock: cfg.LowerFD, serve: hook != nil, proxy: proxyF, stdin: stdin != nil, cfg: cfgMsg}, tr)
		if err != nil {
			return res, err
		}
		sp.connect(stdin, stdout, stderr)
	}
	defer func() {
		if err := sp.release(); err != nil {
			r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
		}
	}()
	proc, stage1, stR := sp.proc, sp.stage1, sp.stR
	wall := lim.Wall
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	kill := sp.kill
	// The timer and cancellation kill PID 1, which takes the whole PID
	// namespace with it.
	timedOut, done := watchdog(runCtx, wall, start, kill)
	if cfg.LowerFD {
		if err := sendIdmappedTrees(sp.fdSockParent, proc.Pid(), stage1, cfg.Workspace, filepath.Dir(cfg.Upper), cfg.Mounts); err != nil {
			kill()
			_ = proc.Wait()
			close(done)
			if stage1 {
				// Stage 1 may have said why (no user namespace).
				b, _ := io.ReadAll(io.LimitReader(stR, nsinit.MaxMessage+4))
				if body, e := nsinit.ReadFrame(bufio.NewReader(bytes.NewReader(b))); e == nil {
					if st, e := nsinit.DecodeStatus(body); e == nil && st.Error != "" {
						err = fmt.Errorf("%s: %s", st.Stage, st.Error)
					}
				}
			}
			return res, fmt.Errorf("%w: idmapped workspace: %w", sandbox.ErrSetup, err)
		}
		tr.Mark("idmapped trees sent")
	}
	if gate != nil {
		if err := gate(); err != nil {
			kill()
			_ = proc.Wait()
			close(done)
			return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		tr.Mark("gate passed (e.g. exec.start recorded)")
	}
	if err := <-sp.cfgWritten; err != nil {
		kill()
	} else if _, err := sp.cfgW.Write([]byte{nsinit.Release}); err != nil {
		kill()
	}
	if !fromSpare {
		sp.cfgW.Close()
	}
	tr.Mark("init released")
	if hook != nil {
		// Serve until Close (or the context, or the init's death); then
		// kill the whole sandbox.
		conn := &instConn{sock: sp.execSock, status: bufio.NewReader(stR), output: lim.Output}
		select {
		case hook.ready <- conn:
			select {
			case <-hook.done:
			case <-runCtx.Done():
			}
		case <-runCtx.Done():
		}
		kill()
		_ = proc.Wait()
		close(done)
		res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
		return res, nil
	}
	// One frame: the init writes it once everything but itself is gone,
	// so the parent need not wait for the pipe's end (the init's whole
	// exit) to read it; Wait below waits for that.
	body, stErr := nsinit.ReadFrame(bufio.NewReaderSize(stR, 512))
	tr.Mark("status read")
	refillNow()
	if stErr != nil && fromSpare && spec.Stdin == nil && ctx.Err() == nil && unread(sp.cfgW) > 0 {
		select {
		case <-timedOut:
		default:
			// The spare died (killed from outside) before it read its
			// release (the init reads no further than its configuration
			// before that), so before anything of this request ran: run
			// it on a sandbox started now, the gate already passed.
			kill()
			_ = proc.Wait()
			close(done)
			r.opts.Logger.Debug("sandbox: a spare died before reading its configuration; starting another")
			return r.run(ctx, spec, tr, stOut, hook, nil, early, false)
		}
	}
	// The cgroup's counters are final once the init has reported (it
	// killed and reaped everything first): read them while it exits.
	var oomKills, pidsMax int
	readEvents := func() {
		if cg != nil {
			oomKills, pidsMax = cg.events()
		}
	}
	if stErr == nil {
		readEvents()
		if early != nil {
			r.reportEarly(early, proc, body, &res, start, timedOut, cg != nil, oomKills, pidsMax, stdout, stderr)
		}
	}
	waitErr := proc.Wait()
	if stErr != nil {
		readEvents()
	}
	close(done)
	tr.Mark("init reaped (pid/net ns gone)")
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()

	var st nsinit.Status
	if stErr == nil {
		st, stErr = nsinit.DecodeStatus(body)
	}
	gotStatus := stErr == nil
	*stOut = st
	select {
	case <-timedOut:
		markTimedOut(&res)
	default:
	}
	if res.Killed == "" && !gotStatus {
		if err := unreported(ctx, &res, cg != nil, oomKills); err != nil {
			if errors.Is(err, errNoReport) {
				err = fmt.Errorf("%w: the sandbox init %s ended without a report (%v; from another build of fluffy?); stderr: %s", sandbox.ErrSetup, r.opts.Init, waitErr, bytes.TrimSpace(res.Stderr))
			}
			return res, err
		}
	}
	if gotStatus && st.Error != "" {
		err := fmt.Errorf("%w: %s: %s", sandbox.ErrSetup, st.Stage, st.Error)
		if stage1 && st.Stage == nsinit.Stage1Stage {
			f := r.facility("userns")
			f.Available = false
			f.Detail = st.Error
			f.Fix = userNSFix
			return res, &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		}
		if st.Stage == "overlay" {
			f := r.facility("overlay-userns")
			f.Available = false
			f.Detail = "mounting the workspace overlay failed: " + st.Error
			f.Fix = overlayFix
			return res, &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		}
		if st.Stage == "command" || st.Stage == "chdir" {
			return res, specError(st)
		}
		return res, err
	}
	applyStatus(&res, st, gotStatus, cg != nil, oomKills, pidsMax, stdout.cut() || stderr.cut())
	return res, nil
}

// launchOpts say what a sandbox needs at its start (launch): everything
// else comes with its configuration.
type launchOpts struct {
	// cg is the sandbox's cgroup (nil: none); from launch on the
	// sandbox owns it (release removes it).
	cg *cgroup
	// fdSock gives the init the socket on which the idmapped trees come
	// (nsinit.Config.LowerFD).
	fdSock bool
	// serve gives the init the exec socket of an instance (fd 7).
	serve bool
	// proxy is the egress proxy's socket (fd nsinit.ProxyFD), or nil.
	proxy *os.File
	// stdin makes the init's stdin a pipe (connect gives it its
	// source); otherwise it is /dev/null.
	stdin bool
	// cfg is the framed configuration, written before the start; nil
	// leaves the init waiting for it (a spare).
	cfg []byte
}

// sandboxProc is a started sandbox init and this process's ends of it.
type sandboxProc struct {
	proc   initProcess
	stage1 bool
	cg     *cgroup
	// cfgW carries the configuration and the release byte; stR the
	// init's status.
	cfgW, stR *os.File
	// cfgWritten receives the configuration's write error (or nil) once
	// it is written.
	cfgWritten   chan error
	fdSockParent int
	execSock     *os.File
	// The init's output goes to stdout and stderr, its stdin (when a
	// pipe) comes from stdin: each passes data only once connected.
	stdout, stderr lateWriter
	stdin          lateReader
	connectOnce    sync.Once
	// ended is closed when the sandbox is over: the thread that cloned
	// the init (whose exit would send it the parent-death signal) is
	// held until then.
	ended chan struct{}
	// launched is when the init was started (a spare's age).
	launched time.Time
}

// kill ends the sandbox. Stage 1 is asked to (SIGTERM): it kills the
// init and ends once the init, and with it the PID namespace, is gone.
func (sp *sandboxProc) kill() {
	if sp.stage1 {
		_ = sp.proc.Signal(syscall.SIGTERM)
	} else {
		_ = sp.proc.Signal(syscall.SIGKILL)
	}
}

// connect gives the init's stdio its request's ends (stdin nil: none,
// the stdin pipe, if any, reads as empty). Only the first call counts.
func (sp *sandboxProc) connect(stdin io.Reader, stdout, stderr io.Writer) {
	sp.connectOnce.Do(func() {
		if sp.stdin.late != nil {
			sp.stdin.connect(stdin)
		}
		sp.stdout.connect(stdout)
		sp.stderr.connect(stderr)
	})
}

// writeConfig writes the framed configuration: at once when the pipe
// holds it (an error, such as the init's death, is then returned),
// otherwise while the init reads it. cfgWritten receives the outcome.
func (sp *sandboxProc) writeConfig(msg []byte) error {
	if n, err := unix.FcntlInt(sp.cfgW.Fd(), unix.F_GETPIPE_SZ, 0); err == nil && n > len(msg) {
		_, err := sp.cfgW.Write(msg)
		sp.cfgWritten <- err
		return err
	}
	go func() {
		_, err := sp.cfgW.Write(msg)
		sp.cfgWritten <- err
	}()
	return nil
}

// release closes this process's ends of a sandbox whose init has been
// reaped, lets the thread that cloned it go and removes its cgroup.
func (sp *sandboxProc) release() error {
	close(sp.ended)
	if sp.cfgW != nil {
		sp.cfgW.Close()
	}
	if sp.stR != nil {
		sp.stR.Close()
	}
	if sp.fdSockParent >= 0 {
		unix.Close(sp.fdSockParent)
	}
	if sp.execSock != nil {
		sp.execSock.Close()
	}
	if sp.cg != nil {
		return sp.cg.remove()
	}
	return nil
}

// launch starts a sandbox init: the pipes and sockets it is given, the
// clone into its namespaces (and its cgroup) and the exec. The init
// then reads its configuration (o.cfg, or what writeConfig sends later).
func (r *Runtime) launch(o launchOpts, tr *nsinit.Tracer) (sp *sandboxProc, err error) {
	cg := o.cg
	sp = &sandboxProc{cg: cg, fdSockParent: -1, cfgWritten: make(chan error, 1), ended: make(chan struct{}),
		stdout: newLateWriter(), stderr: newLateWriter()}
	if o.stdin {
		sp.stdin = newLateReader()
	}
	// The init's ends, closed once it holds them (or the start failed).
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			if err := sp.release(); err != nil {
				r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
			}
		}
	}()
	stR, stW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	sp.stR = stR
	childEnds = append(childEnds, stW)
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		stR.Close()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	sp.cfgW = cfgW
	childEnds = append(childEnds, cfgR)
	var fdSock *os.File
	if o.fdSock {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		fdSock, sp.fdSockParent = os.NewFile(uintptr(pair[1]), "fdsock"), pair[0]
		childEnds = append(childEnds, fdSock)
	}
	// A pre-warmed instance receives its commands, with their stdio,
	// over a socket (fd 7).
	var execSock *os.File
	if o.serve {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		execSock, sp.execSock = os.NewFile(uintptr(pair[1]), "execsock"), os.NewFile(uintptr(pair[0]), "execsock")
		childEnds = append(childEnds, execSock)
	}
	if o.cfg != nil {
		_ = sp.writeConfig(o.cfg)
	}
	// The init is executed through a descriptor: the sandbox's user
	// (SandboxUID, for root) need not be able to traverse the binary's
	// directories (go test builds in 0700 directories).
	selfF, err := os.Open(r.opts.Init)
	if err != nil {
		return nil, fmt.Errorf("%w: open the sandbox init binary: %w", sandbox.ErrSetup, err)
	}
	childEnds = append(childEnds, selfF)
	var stdin io.Reader
	if sp.stdin.late != nil {
		stdin = sp.stdin
	}
	hostUID, hostGID := r.hostIDs()
	// stage1: the small init binary is started without namespaces (a
	// cheap vfork of this large process) and clones the namespaced init
	// from its own small address space (nsinit.Stage1Main). The fallback
	// (this binary re-executed) and the paths that move the init into its
	// cgroup after the start clone the init directly.
	newCmd := func(stage1 bool) *exec.Cmd {
		cmd := &exec.Cmd{
			Path:       "/proc/self/fd/6",
			Args:       []string{nsinit.Arg0},
			Env:        []string{"GOMAXPROCS=1"},
			Stdout:     sp.stdout,
			Stderr:     sp.stderr,
			ExtraFiles: []*os.File{cfgR, stW, fdSock, selfF, execSock, o.proxy},
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
					syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostGID, Size: 1}},
				// Become uid 0 of the new namespace explicitly: without it a
				// root caller's child keeps host uid 0 credentials.
				Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: r.uid != 0},
				// Root can drop its supplementary groups; others cannot.
				GidMappingsEnableSetgroups: r.uid == 0,
				Setsid:                     true,
				Pdeathsig:                  syscall.SIGKILL,
			},
			Stdin: stdin,
		}
		if stage1 {
			root := "0"
			if r.uid == 0 {
				root = "1"
			}
			given := make([]byte, len(cmd.ExtraFiles))
			for i, f := range cmd.ExtraFiles {
				given[i] = '0'
				if f != nil {
					given[i] = '1'
				}
			}
			cmd.Args = []string{nsinit.Stage1Arg0, strconv.Itoa(hostUID), strconv.Itoa(hostGID), root, string(given)}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
		}
		return cmd
	}
	tr.Mark("pipes, binary opened")
	// A cgroup v2 is entered by the clone itself (CLONE_INTO_CGROUP):
	// migrating a running process costs milliseconds (an RCU grace
	// period), and the init starts inside its limits.
	stage1 := r.useStage1(cg)
	cmd := newCmd(stage1)
	cgJoined := false
	if cg != nil && cg.v2 {
		if fd, err := unix.Open(cg.dirs[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			cgJoined = true
		}
	}
	// The init is started by vfork (vfork_linux.go), stage 1 and the
	// fallback by os/exec; from an OS thread of its own, which stays
	// until the run ends (the parent-death signal follows the thread).
	var proc initProcess
	var vp *vforkProcess
	newProc := func() {
		proc, vp = execProcess{cmd}, nil
		if !stage1 && vforkSupported && !r.noVfork {
			vp = &vforkProcess{cmd: cmd}
			proc = vp
		}
	}
	newProc()
	launch := func() error {
		err := proc.Start()
		if err != nil && vp != nil {
			r.opts.Logger.Debug("sandbox: vfork start failed, starting the init with os/exec", "err", err)
			proc = execProcess{cmd}
			err = proc.Start()
		}
		return err
	}
	reusable := func() bool { return vp == nil || vp.Reusable() }
	ended := sp.ended
	var entered bool
	if cg != nil && !cg.v2 && r.cgl.v1Threads {
		// cgroup v1: the init is cloned by a thread visiting the cgroup,
		// so it is born inside (no migration, no RCU grace period).
		entered, err = cg.startInside(r.cgl, launch, reusable, ended)
		if entered {
			cgJoined = true
		} else {
			r.opts.Logger.Debug("sandbox cgroup: cannot clone from inside, joining after the start", "err", err)
			cmd, err, stage1 = newCmd(false), nil, false
			newProc()
		}
	}
	var primed chan struct{}
	if cg != nil && !cgJoined {
		primed = make(chan struct{})
		go func() {
			defer close(primed)
			cg.prime(r.cgl)
		}()
	}
	if !entered && err == nil {
		_, err = startOnThread(nil, nil, nil, launch, reusable, ended)
		if err != nil && cgJoined {
			// A kernel without clone3's cgroup field (ENOSYS, E2BIG), or a
			// cgroup the clone may not enter directly (delegation rules):
			// join after the start instead, as on cgroup v1.
			cmd, cgJoined, stage1 = newCmd(false), false, false
			newProc()
			_, err = startOnThread(nil, nil, nil, launch, reusable, ended)
		}
	}
	tr.Mark("clone, id maps, exec (cmd.Start)")
	if err != nil {
		if primed != nil {
			<-primed
		}
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			f := r.facility("userns")
			f.Available = false
			f.Detail = "creating the namespaces failed: " + err.Error()
			f.Fix = userNSFix
			return nil, &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		}
		return nil, fmt.Errorf("%w: start the sandbox init %s: %w", sandbox.ErrSetup, r.opts.Init, err)
	}
	sp.proc, sp.stage1, sp.launched = proc, stage1, time.Now()
	if cg != nil && !cgJoined {
		if primed != nil {
			<-primed
			tr.Mark("cgroup lock primed")
		}
		if err := cg.add(proc.Pid()); err != nil {
			sp.connect(nil, io.Discard, io.Discard)
			sp.kill()
			_ = proc.Wait()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		tr.Mark("cgroup joined")
	}
	return sp, nil
}

// unread returns how many bytes wait in the pipe behind f (FIONREAD, alias TIOCINQ), or
// 0 when unknown.
func unread(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n = v
		}
	})
	return n
}

// markTimedOut records that the wall-clock timeout killed the sandbox.
func markTimedOut(res *sandbox.Result) {
	res.Killed = sandbox.LimitTime
	res.Hit = append(res.Hit, sandbox.LimitTime)
	res.ExitCode, res.Signal = -1, int(syscall.SIGKILL)
}

// applyStatus completes the result of a run whose init reported without
// an error (or did not report, killed by a limit): the command's status,
// the limits it hit (the cgroup's counters when there is a cgroup), and
// whether its output was cut.
func applyStatus(res *sandbox.Result, st nsinit.Status, gotStatus, haveCgroup bool, oomKills, pidsMax int, outputCut bool) {
	if gotStatus {
		res.Setup = time.Duration(st.SetupNanos)
		if res.Killed == "" {
			res.ExitCode, res.Signal = st.ExitCode, st.Signal
		}
		if st.TmpFull {
			res.Hit = append(res.Hit, sandbox.LimitTmp)
		}
		if st.UpperFull {
			res.Hit = append(res.Hit, sandbox.LimitChangeSet)
		}
		res.ChangeSetWritten = st.UpperWritten
	}
	if haveCgroup {
		if oomKills > 0 && res.Killed == "" {
			res.Killed = sandbox.LimitMemory
		}
		if oomKills > 0 {
			res.Hit = append(res.Hit, sandbox.LimitMemory)
		}
		if pidsMax > 0 {
			res.Hit = append(res.Hit, sandbox.LimitPids)
		}
	}
	switch syscall.Signal(res.Signal) {
	case syscall.SIGXCPU:
		res.Killed = sandbox.LimitCPU
		res.Hit = append(res.Hit, sandbox.LimitCPU)
	case syscall.SIGXFSZ:
		res.Killed = sandbox.LimitFileSize
		res.Hit = append(res.Hit, sandbox.LimitFileSize)
	}
	if outputCut {
		res.Hit = append(res.Hit, sandbox.LimitOutput)
	}
}

// sendIdmappedTrees clones the workspace mount (read-only), the change
// set's parent directory and the extra mounts (read-only unless
// writable), maps their ids through the sandbox's user namespace (on-disk
// uid 0 becomes the sandbox's uid 0, which is host SandboxUID) and sends the
// detached trees to the init, in that order. On disk everything stays
// owned by root; no path needs to be traversable by SandboxUID. The sandbox's
// user namespace is pid's, or, when pid is stage 1, the one stage 1 sends
// on sock.
func sendIdmappedTrees(sock, pid int, stage1 bool, ws, csParent string, mounts []nsinit.MountSpec) error {
	var ns int
	var err error
	if stage1 {
		ns, err = receiveUserNS(sock)
	} else {
		ns, err = unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	fds, err := idmappedTrees(ns, ws, csParent, mounts)
	if err != nil {
		return err
	}
	defer closeAll(fds)
	return unix.Sendmsg(sock, []byte{0}, unix.UnixRights(fds...), nil, 0)
}

// idmappedTrees returns the detached idmapped trees sendIdmappedTrees
// sends, their ids mapped through the user namespace ns.
func idmappedTrees(ns int, ws, csParent string, mounts []nsinit.MountSpec) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeAll(fds)
			fds = nil
		}
	}()
	dirs, rw := []string{ws, csParent}, []bool{false, true}
	for _, m := range mounts {
		dirs, rw = append(dirs, m.Source), append(rw, m.Writable)
	}
	for i, dir := range dirs {
		tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fds, fmt.Errorf("open_tree %s: %w", dir, err)
		}
		fds = append(fds, tree)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(ns)}
		if !rw[i] {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fds, fmt.Errorf("mount_setattr idmap %s: %w", dir, err)
		}
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// receiveUserNS receives the user namespace descriptor stage 1 sends.
func receiveUserNS(sock int) (int, error) {
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("user namespace from stage 1: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("user namespace from stage 1: no descriptor (%d bytes; stage 1 failed?)", n)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("user namespace from stage 1: want one descriptor, got %d (%v)", len(fds), err)
	}
	return fds[0], nil
}

// resolveDir returns the symlink-free absolute path of an existing
// directory.
func resolveDir(p, what string) (string, error) {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", sandbox.ErrInvalidSpec, what, err)
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", sandbox.ErrInvalidSpec, what, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s %s is not a directory", sandbox.ErrInvalidSpec, what, p)
	}
	return r, nil
}

// wantsCgroup says whether a run with lim gets a cgroup: it has memory or
// process limits and the host has cgroups.
func (r *Runtime) wantsCgroup(lim sandbox.Limits) bool {
	return (lim.Memory > 0 || lim.Pids > 0) && r.cgl.available
}

// lowerFD says whether cfg's workspace (and change set, and mounts) come
// as idmapped trees (nsinit.Config.LowerFD): root's sandboxes are host
// uid SandboxUID, and an idmapped clone of the workspace makes its
// root-owned files the sandbox root's.
func (r *Runtime) lowerFD(cfg *nsinit.Config) bool {
	return r.uid == 0 && cfg.Workspace != "" && !cfg.WorkspaceRO
}

// makeWork makes the overlay's work directory beside upper.
func makeWork(upper string) (string, error) {
	work, err := os.MkdirTemp(filepath.Dir(upper), ".fluffy-work-")
	if err != nil {
		return "", fmt.Errorf("%w: overlay work directory: %w", sandbox.ErrSetup, err)
	}
	return work, nil
}

// removeWork removes an overlay work directory (whose inner "work"
// directory the kernel leaves with mode 0).
func removeWork(dir string) {
	if dir == "" {
		return
	}
	if removeWorkFast(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// workLeftovers is what a volatile overlay leaves in its work directory
// once unmounted, deepest first: the marker of a volatile mount and its
// directories, and the (mode 0) work directory itself.
var workLeftovers = []struct {
	path string
	dir  bool
}{
	{"work/incompat/volatile/dirty", false},
	{"work/incompat/volatile", true},
	{"work/incompat", true},
	{"work", true},
}

// removeWorkFast removes a work directory that holds exactly what an
// unmounted volatile overlay leaves (workLeftovers), by name: five
// unlinks instead of a walk that changes each directory's mode first
// (journalled metadata writes, all of them). Any surprise (an entry
// missing, another one present, a permission a non-root caller lacks)
// makes it fail; removeWork then walks.
func removeWorkFast(dir string) error {
	d, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	for _, l := range workLeftovers {
		flags := 0
		if l.dir {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(d, l.path, flags); err != nil {
			return err
		}
	}
	return unix.Rmdir(dir)
}

// capWriter keeps the first max bytes (0 means unlimited), then discards
// (the command is not blocked), remembering it did.
type capWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int64
	tee       io.Writer
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if w.max > 0 {
		room := w.max - int64(w.buf.Len())
		if room <= 0 {
			w.truncated = true
			return n, nil
		}
		if int64(len(p)) > room {
			p = p[:room]
			w.truncated = true
		}
	}
	w.buf.Write(p)
	if w.tee != nil {
		_, _ = w.tee.Write(p)
	}
	return n, nil
}

// cut says whether output was discarded past the limit.
func (w *capWriter) cut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.truncated
}

func (w *capWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := bytes.Clone(w.buf.Bytes())
	if w.truncated {
		b = append(b, sandbox.TruncationMarker...)
		if w.tee != nil {
			_, _ = io.WriteString(w.tee, sandbox.TruncationMarker)
		}
	}
	return b
}

// outputDrainer is an init process whose output copies can be awaited
// apart from its exit.
type outputDrainer interface{ drained() }

// reportEarly gives early the result of a run whose init reported
// without an error, once its output has ended (see RunEarly).
func (r *Runtime) reportEarly(early func(sandbox.Result), proc initProcess, body []byte, res *sandbox.Result, start time.Time,
	timedOut <-chan struct{}, haveCgroup bool, oomKills, pidsMax int, stdout, stderr *capWriter) {
	st, err := nsinit.DecodeStatus(body)
	if err != nil || st.Error != "" {
		return
	}
	r.reportEarlyStatus(early, proc, st, res, start, timedOut, haveCgroup, oomKills, pidsMax, stdout, stderr)
}

// reportEarlyStatus hands early the result of st once the output is
// all in.
func (r *Runtime) reportEarlyStatus(early func(sandbox.Result), proc initProcess, st nsinit.Status, res *sandbox.Result, start time.Time,
	timedOut <-chan struct{}, haveCgroup bool, oomKills, pidsMax int, stdout, stderr *capWriter) {
	d, ok := proc.(outputDrainer)
	if !ok {
		return
	}
	d.drained()
	er := *res
	er.Hit = append([]sandbox.Limit(nil), res.Hit...)
	er.Duration = time.Since(start)
	select {
	case <-timedOut:
		markTimedOut(&er)
	default:
	}
	applyStatus(&er, st, true, haveCgroup, oomKills, pidsMax, stdout.cut() || stderr.cut())
	early(er)
}

// addRlimits adds the rlimits of lim to cfg (memory and processes too
// when there is no cgroup) and returns the warnings that go with them.
func addRlimits(cfg *nsinit.Config, lim sandbox.Limits, haveCg bool) (warnings []string) {
	if lim.CPU > 0 {
		secs := uint64((lim.CPU + time.Second - 1) / time.Second)
		cfg.Rlimits = append(cfg.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_CPU, Value: secs})
	}
	if lim.FileSize > 0 {
		cfg.Rlimits = append(cfg.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_FSIZE, Value: uint64(lim.FileSize)})
	}
	if lim.OpenFiles > 0 {
		cfg.Rlimits = append(cfg.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_NOFILE, Value: uint64(lim.OpenFiles)})
	}
	if !haveCg {
		if lim.Memory > 0 {
			cfg.Rlimits = append(cfg.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_AS, Value: uint64(lim.Memory)})
			warnings = append(warnings, "no usable cgroup: memory limited by RLIMIT_AS (address space) per process; exceeding it fails allocations instead of killing")
		}
		if lim.Pids > 0 {
			cfg.Rlimits = append(cfg.Rlimits, nsinit.Rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(lim.Pids)})
		}
	}
	return warnings
}

// errNoReport: the sandbox ended without a report and no limit or
// cancellation explains it.
var errNoReport = errors.New("no report")

// unreported completes res for a sandbox that ended without reporting
// and was not timed out: the caller's context ended, or the memory
// limit killed it (the cgroup's OOM kills); otherwise errNoReport.
func unreported(ctx context.Context, res *sandbox.Result, haveCg bool, oomKills int) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox: %w", ctx.Err())
	}
	if haveCg && oomKills > 0 {
		res.Killed = sandbox.LimitMemory
		res.Hit = append(res.Hit, sandbox.LimitMemory)
		res.ExitCode, res.Signal = -1, int(syscall.SIGKILL)
		return nil
	}
	return errNoReport
}

// watchdog calls kill when wall (if above zero) has passed since start,
// closing timedOut first, or when ctx ends; closing done stops it.
func watchdog(ctx context.Context, wall time.Duration, start time.Time, kill func()) (timedOut, done chan struct{}) {
	timedOut, done = make(chan struct{}), make(chan struct{})
	go func() {
		var timer <-chan time.Time
		if wall > 0 {
			t := time.NewTimer(wall - time.Since(start))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-timer:
			close(timedOut)
			kill()
		case <-ctx.Done():
			kill()
		case <-done:
		}
	}()
	return timedOut, done
}
