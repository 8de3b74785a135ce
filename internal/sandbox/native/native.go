// Package native is fluffy's Linux sandbox backend. Each run gets new
// user, mount, PID, network, IPC, UTS and cgroup namespaces and a minimal
// root (system directories read-only, fresh /proc, a tty-less /dev, a
// private tmpfs /tmp, the workspace as an overlay whose upper layer is
// the change set) reached with pivot_root; then every capability is
// dropped, no_new_privs set, a landlock ruleset and a seccomp filter
// applied, rlimits set, and the command started in a session of its own
// with a cgroup (memory, pids) where the host allows one.
//
// A run starts its sandbox in one of five start modes (startMode in
// mode.go, tried in its order by Runtime.run; docs/sandbox.md). In the
// ahead and direct modes PID 1 is a vfork child of this process that
// builds the sandbox with raw system calls the parent prepared, then
// becomes a small reaper (direct_linux.go): no Go program runs inside.
// The vfork, stage-1 and exec modes start the Go init instead (package
// nsinit; initrun.go), for what a direct start cannot do. Go cannot run
// code between fork and exec, so the init is a program of its own:
// cmd/fluffy-sandbox-init, a small binary installed beside fluffy, or,
// when that is absent, the fluffy binary itself, which dispatches to
// InitMain when argv[0] is InitArg0. The init is cloned with vfork
// semantics although it gets a new user namespace (vfork_linux.go), so
// no run copies this process's address space, however big its heap;
// where that is not possible, os/exec starts it, directly or through
// stage 1 (nsinit.Stage1Main, Runtime.useStage1). The seccomp program is
// assembled by the parent (package sandbox) and loaded as raw BPF;
// landlock is applied with raw system calls.
package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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
	// NoNetNSPool makes every direct start create its network namespace
	// in its clone, never ahead (netns_linux.go).
	NoNetNSPool bool
	// NoDirect starts every sandbox through the Go init, never directly
	// (direct_linux.go); tests and benchmarks compare both ways.
	NoDirect bool
	// Uppers, when set, is shared with the other runtimes of this
	// process, native and container, that may mount the same change sets
	// (uppers.go); nil means one of this runtime's own.
	Uppers *Uppers
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
	if opts.Uppers == nil {
		opts.Uppers = NewUppers()
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
const InitBinaryName = sandbox.InitBinaryName

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
// runs.
func (r *Runtime) Prepare() { r.detect() }

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
	res, mode, err := r.run(ctx, &request{spec: spec, gate: gate, early: early, tr: tr, st: &st})
	if mode != 0 {
		res.StartMode = mode.String()
	}
	if tr.On {
		tr.Mark("cleaned up")
		writeTrace(r.opts.Trace, mode, tr.Marks, st.Marks)
		writeCPU(r.opts.Trace, &before, st.CommandCPU, mode.direct())
	}
	return res, err
}

// config turns spec into the init's configuration: the host's
// facilities (warnings for those missing go to res), the resolved paths,
// the change set made. The overlay's work directory (cfg.Work) is the
// caller's to make (makeWork).
func (r *Runtime) config(spec sandbox.Spec, tr *nsinit.Tracer, res *sandbox.Result) (*nsinit.Config, error) {
	r.detect()
	if spec.Seccomp == "" {
		spec.Seccomp = "standard"
	}
	cfg := nsinit.Config{Protocol: nsinit.Protocol, Argv: spec.Argv, Env: spec.Env, TmpSize: spec.TmpSize, Dir: spec.Dir, Trace: tr.On}
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
			return nil, &sandbox.UnavailableError{Missing: missing, Degradable: true}
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
			cfg.OverlayRO = spec.WorkspaceReadOnly
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

// request is one run as its caller asked for it, handed from run to the
// start mode that takes it.
type request struct {
	spec  sandbox.Spec
	gate  func() error
	early func(sandbox.Result)
	tr    *nsinit.Tracer
	// st receives the init's status (a traced run prints its marks).
	st *nsinit.Status
}

// noImage refuses a spec naming a container image: a native sandbox is
// built from the host's own files, it has no image to start from.
func noImage(spec sandbox.Spec) error {
	if spec.Image != "" {
		return fmt.Errorf("%w: the native runtime runs no container image (%s): a container runtime (sandbox.runtime docker or podman) does", sandbox.ErrInvalidSpec, spec.Image)
	}
	return nil
}

// run prepares a run (the spec's checks, the init's configuration, the
// overlay's work directory, the egress proxy's socket) and hands it to
// the first start mode that can take it: ahead, direct, then the Go init
// (runInit). It returns the mode taken (0 when the run failed before
// one was).
func (r *Runtime) run(ctx context.Context, req *request) (res sandbox.Result, mode startMode, err error) {
	spec, tr := req.spec, req.tr
	if err := spec.Validate(); err != nil {
		return res, 0, err
	}
	if err := noImage(spec); err != nil {
		return res, 0, err
	}
	cfg, err := r.config(spec, tr, &res)
	if err != nil {
		return res, 0, err
	}
	// Limits: a cgroup where the host allows it, rlimits always.
	lim := spec.Limits
	wantCg := r.wantsCgroup(lim)
	// No other overlay on this change set's upper directory while this
	// run's is mounted (uppers.go); a sandbox built ahead on it is this
	// run's to take, or it goes before this run mounts its own.
	a, hold, err := r.holdUpper(ctx, cfg.Upper)
	if err != nil {
		return res, 0, err
	}
	defer func() { hold.Release() }()
	if a != nil {
		ac := *cfg
		warnings := addRlimits(&ac, lim, wantCg)
		// A traced run or one through the egress proxy never fits.
		if !tr.On && spec.Network != sandbox.NetworkProxy && r.useAhead(a, &ac, lim, wantCg, spec.Scratch) {
			if spec.Yield != nil {
				a.hold.Idle(spec.Yield)
			}
			res.Warnings = append(res.Warnings, warnings...)
			res, err = r.runAhead(ctx, a, spec, res, req.gate, req.early, tr, req.st)
			return res, modeAhead, err
		}
		hold = r.dropAhead(a)
	}
	if spec.Yield != nil {
		// A long-lived run: one that needs the upper asks it to end.
		hold.Idle(spec.Yield)
	}
	if cfg.Upper != "" {
		work, err := makeWork(cfg.Upper)
		if err != nil {
			return res, 0, err
		}
		defer removeWork(work)
		cfg.Work = work
		if strings.ContainsAny(work, ",:\\\n") {
			return res, 0, fmt.Errorf("%w: %q: overlay paths may not contain , : \\ or newlines", sandbox.ErrInvalidSpec, work)
		}
	}
	proxyF, err := r.proxySocket(cfg, spec)
	if err != nil {
		return res, 0, err
	}
	if proxyF != nil {
		defer proxyF.Close()
	}
	tr.Mark("spec, facilities, work dir")
	if proxyF == nil && r.directOK(cfg, wantCg) {
		res, err = r.startDirect(ctx, cfg, spec, res, req.early, req.gate, tr, req.st)
		return res, modeDirect, err
	}
	return r.runInit(ctx, req, cfg, proxyF, res)
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
	// fixed, when not nil, replaces buf: Limits.Output bytes (and room
	// for the truncation marker) of sandbox.Spec.Scratch, outside the
	// heap, filled up to n. ReadFrom reads the pipe straight into it, so
	// no copy buffer of io.Copy's holds the output either.
	fixed []byte
	n     int
	// sink takes what is read past max, to be dropped (scratch too).
	sink []byte
	// live: everything goes to tee, nothing is kept (Spec.Live).
	live bool
}

// newCapWriter captures up to max bytes (0: no bound), teeing them to
// tee; with sc and a bound, it captures into sc's memory. A live writer
// keeps nothing (Spec.Live).
func newCapWriter(max int64, tee io.Writer, sc sandbox.Scratch, live bool) *capWriter {
	w := &capWriter{max: max, tee: tee, live: live}
	if sc != nil && !live && max > 0 && max < 1<<30 {
		w.fixed = sc.Bytes(int(max) + len(sandbox.TruncationMarker))
		if w.fixed != nil {
			w.sink = sc.Bytes(32 << 10)
		}
		if w.sink == nil {
			w.fixed = nil
		}
	}
	return w
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if w.live {
		if w.tee != nil {
			_, _ = w.tee.Write(p)
		}
		return n, nil
	}
	if w.max > 0 {
		room := w.max - int64(w.len())
		if room <= 0 {
			w.truncated = true
			return n, nil
		}
		if int64(len(p)) > room {
			p = p[:room]
			w.truncated = true
		}
	}
	if w.fixed != nil {
		w.n += copy(w.fixed[w.n:w.max], p)
	} else {
		w.buf.Write(p)
	}
	if w.tee != nil {
		_, _ = w.tee.Write(p)
	}
	return n, nil
}

func (w *capWriter) len() int {
	if w.fixed != nil {
		return w.n
	}
	return w.buf.Len()
}

// ReadFrom reads r to its end into the fixed buffer (io.Copy calls it
// with the output pipe); without one it copies through Write.
func (w *capWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.fixed == nil {
		return io.Copy(struct{ io.Writer }{w}, r)
	}
	var total int64
	for {
		w.mu.Lock()
		dst := w.sink
		if room := int(w.max) - w.n; room > 0 {
			dst = w.fixed[w.n:w.max]
		}
		w.mu.Unlock()
		// The lock is not held across the read: a read blocks until
		// the command writes. Only this goroutine appends.
		k, err := r.Read(dst)
		total += int64(k)
		if k > 0 {
			w.mu.Lock()
			if &dst[0] == &w.sink[0] {
				w.truncated = true
				clear(dst[:k])
			} else {
				if w.tee != nil {
					_, _ = w.tee.Write(dst[:k])
				}
				w.n += k
			}
			w.mu.Unlock()
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// cut says whether output was discarded past the limit.
func (w *capWriter) cut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.truncated
}

// bytes is the captured output (and the truncation marker when output was
// cut): a copy on the heap, or the fixed buffer itself, which its
// Scratch's holder zeroes.
func (w *capWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b []byte
	if w.fixed != nil {
		b = w.fixed[:w.n]
	} else {
		b = bytes.Clone(w.buf.Bytes())
	}
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

// Close ends the sandbox built ahead (PrepareNext) and releases what
// direct starts keep between runs (the idmapped trees' user namespace,
// the reaper, the network namespace made ahead). Runs in progress are
// not waited for (each tears its own sandbox down before it returns);
// runs after Close work. It is safe to call more than once.
func (r *Runtime) Close() error {
	r.closeAhead()
	if r.idmap.fd > 0 {
		// Once made (idmapNS), it is never made again.
		unix.Close(r.idmap.fd)
		r.idmap.fd = -1
	}
	if r.reaper.f != nil {
		r.reaper.f.Close()
	}
	r.closeNetNS()
	return nil
}

// SweepStale removes what sandboxes of fluffy processes that are gone
// left behind (their cgroups, when such a process was killed with
// SIGKILL: its sandboxes die with it, their cgroup directories stay) and
// returns how many it removed. The sandbox server calls it when it
// starts.
func (r *Runtime) SweepStale() (int, error) {
	r.detect()
	return r.cgl.sweep()
}

// specError is the error of an init whose command could not start: the
// spec's fault, and ErrCommandNotFound too when its program was not on
// the PATH.
func specError(st nsinit.Status) error {
	if st.NotFound {
		return fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, &notFoundError{msg: st.Error})
	}
	return fmt.Errorf("%w: %s", sandbox.ErrInvalidSpec, st.Error)
}

// notFoundError keeps the init's own words ("x: command not found in the
// sandbox (PATH=...)") and matches sandbox.ErrCommandNotFound.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return sandbox.ErrCommandNotFound }
