// Package docker is the container backend of the sandbox: it implements
// sandbox.Runtime and sandbox.Starter on a Docker Engine (or Podman's
// Docker-compatible API) through the official client,
// github.com/moby/moby/client (DOCKER_HOST honoured, the local socket by
// default).
//
// Every sandbox is a container started from a locally built image, no
// registry needed (EnsureDebianImage: Debian packages from the host's apt
// sources imported by the engine; EnsureBaseImage: busybox FROM scratch), with a
// read-only root filesystem, all capabilities dropped, no-new-privileges,
// the seccomp profile of the spec exported from the same Go definition the
// native backend assembles to BPF (sandbox.Profile.DockerJSON), network
// none, pids/memory/CPU limits, rlimits and a size-limited tmpfs /tmp. Its
// keep-alive process is the engine's init (tini) running sleep; commands
// run in it with exec, so a container can be started ahead of its command
// (Start, Pool) and Run is Start + one Exec + Close. Network mode proxy
// keeps network none: this process listens on the container's loopback
// (a socket opened in its network namespace) and forwards to the egress
// proxy (egress.go).
//
// The workspace is shown through the session's change set: the kernel side
// (this process, as root, in the engine's mount namespace) mounts an
// overlay with the workspace as the lower layer and the change set as the
// upper layer on a private directory, and bind-mounts the merged directory
// into the container at the workspace's path. The container sees the
// merged view; its writes land in the change set. A read-only workspace
// (Spec.WorkspaceReadOnly) is an overlay of two lower layers, the change
// set over the workspace, with no upper layer. Either way the container
// holds the change set in Options.Uppers (package uppers) from before the
// overlay is mounted until it is unmounted: no other overlay of this
// process (another container, a native sandbox) is on the change set
// meanwhile, as its upper or as a lower layer, and another process is
// refused. See docs/containers.md.
//
// A command's secret-bearing variables and its output keep off the heap
// and out of the engine's API: the variables arrive through a file on a
// tmpfs of the container's own (envfile.go), and the output is read from
// the engine's socket into the spec's arena (stream.go).
//
// Every container carries labels (LabelManaged, LabelSession,
// LabelTemplate, LabelOwner, LabelMount): GC removes those whose owning
// process is gone, with their overlay mounts.
package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Labels set on every container fluffy creates.
const (
	LabelManaged  = "dev.fluffy.managed"  // "1"
	LabelSession  = "dev.fluffy.session"  // the session id
	LabelTemplate = "dev.fluffy.template" // the template name
	LabelOwner    = "dev.fluffy.owner"    // "pid:starttime" of the creating process
	LabelMount    = "dev.fluffy.mount"    // the host overlay mount point, when a workspace is shown
	LabelWork     = "dev.fluffy.work"     // the overlay work directory
)

// Options configure a Runtime.
type Options struct {
	// Host is the engine address ("unix:///run/podman/podman.sock");
	// empty means DOCKER_HOST, else the local Docker socket.
	Host string
	// Image is the image sandboxes start from; empty means BaseImage.
	Image string
	// Session and Template label every container.
	Session, Template string
	// CPUs is the CPU quota of one container (1.5 = one and a half
	// cores); 0 means none.
	CPUs float64
	// StateDir holds the overlay mount points; empty means
	// /run/fluffy/docker.
	StateDir string
	// UserXattr says the change sets of the specs were written by the
	// native runtime's overlays (a native session's), which keep their
	// opaque directories' marks in the user.overlay.* xattrs: the
	// workspace overlay reads those (mount option userxattr), so a
	// folder a native command replaced shows none of what it held.
	UserXattr bool
	// Uppers, when set, is shared with the other runtimes of this
	// process, native and container, that may mount the same change
	// sets; nil means one of this runtime's own.
	Uppers *uppers.Registry
	// Logger receives debug records; nil discards them.
	Logger *slog.Logger
}

// Runtime runs sandboxes as containers.
type Runtime struct {
	cli   *client.Client
	opts  Options
	owner string
	log   *slog.Logger
	// podman: Podman's compatible API reads "seccomp=" as a file path
	// where Docker's takes the profile itself.
	podman bool
	// engineLimits are the engine's nofile and nproc limits (Podman on a
	// local socket only).
	engineLimits []container.Ulimit
}

// Podman reports whether the engine is Podman.
func (r *Runtime) Podman() bool { return r.podman }

// seccompOpt returns the security option carrying the profile.
func (r *Runtime) seccompOpt(profile []byte) (string, error) {
	if !r.podman {
		return "seccomp=" + string(profile), nil
	}
	sum := sha256.Sum256(profile)
	p := filepath.Join(r.opts.StateDir, "seccomp-"+hex.EncodeToString(sum[:8])+".json")
	if _, err := os.Stat(p); err == nil {
		return "seccomp=" + p, nil
	}
	if err := os.MkdirAll(r.opts.StateDir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(r.opts.StateDir, ".seccomp-")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(profile)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return "seccomp=" + p, nil
}

var (
	_ sandbox.Runtime = (*Runtime)(nil)
	_ sandbox.Starter = (*Runtime)(nil)
)

// New connects to the engine and checks that it answers. An engine that
// cannot be reached is reported as *sandbox.UnavailableError.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	cli, err := newClient(opts.Host)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "container-engine", Required: true,
			Detail: fmt.Sprintf("no container engine answers at %s: %v", cli.DaemonHost(), err),
			Fix:    "install docker.io and start dockerd (or run `podman system service` and set DOCKER_HOST to its socket)"}}}
	}
	if opts.Image == "" {
		opts.Image = BaseImage
	}
	if opts.StateDir == "" {
		opts.StateDir = "/run/fluffy/docker"
	}
	if opts.Template == "" {
		opts.Template = "code-executor"
	}
	if opts.Uppers == nil {
		opts.Uppers = uppers.NewRegistry()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	owner, err := ownerLabel(os.Getpid())
	if err != nil {
		cli.Close()
		return nil, err
	}
	r := &Runtime{cli: cli, opts: opts, owner: owner, log: log}
	if v, err := cli.ServerVersion(pctx, client.ServerVersionOptions{}); err == nil {
		for _, c := range v.Components {
			r.podman = r.podman || strings.Contains(c.Name, "Podman")
		}
	}
	if r.podman {
		r.engineLimits = peerLimits(cli.DaemonHost())
	}
	return r, nil
}

func newClient(host string) (*client.Client, error) {
	ops := []client.Opt{client.FromEnv}
	if host != "" {
		ops = append(ops, client.WithHost(host))
	}
	cli, err := client.New(ops...)
	if err != nil {
		return nil, fmt.Errorf("%w: docker client: %w", sandbox.ErrSetup, err)
	}
	return cli, nil
}

// Client returns the engine client (for image builds and GC).
func (r *Runtime) Client() *client.Client { return r.cli }

// Close releases the client connection.
func (r *Runtime) Close() error { return r.cli.Close() }

// Run starts a container for spec, runs spec.Argv in it and removes it.
func (r *Runtime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	t0 := time.Now()
	inst, err := r.start(ctx, spec, false)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer func() {
		_, sp := telemetry.StartChild(ctx, telemetry.SpanContainerStop, trace.SpanKindClient, r.spanAttrs(inst.id)...)
		sp.Fail(inst.Close())
		sp.End()
	}()
	res, err := inst.exec(ctx, callOf(spec))
	res.Setup += time.Since(t0) - res.Duration - res.Setup
	return res, err
}

// Start creates and starts a container for spec (whose Argv is ignored)
// and returns it ready for Exec.
// With a workspace it waits while another sandbox has the change set
// mounted, and asks an idle one (started ahead) to go.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return r.start(ctx, spec, false)
}

// startAhead is Start for a container started ahead of its command
// (Pool.Warm): it evicts nobody, and with a workspace it fails with
// uppers.ErrHeld when an idle sandbox holds the change set already.
func (r *Runtime) startAhead(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return r.start(ctx, spec, true)
}

// startContainer starts the created container id and inspects it, in
// the span telemetry.SpanContainerStart under a traced call.
func (r *Runtime) startContainer(ctx context.Context, id string) (info client.ContainerInspectResult, err error) {
	ctx, sp := telemetry.StartChild(ctx, telemetry.SpanContainerStart, trace.SpanKindClient, r.spanAttrs(id)...)
	defer func() {
		sp.Fail(err)
		sp.End()
	}()
	if _, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return info, fmt.Errorf("%w: starting the container: %w", sandbox.ErrSetup, err)
	}
	info, err = r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || info.Container.State == nil || info.Container.State.Pid == 0 {
		return info, fmt.Errorf("%w: the container did not start: %v", sandbox.ErrSetup, err)
	}
	return info, nil
}

// spanAttrs are a container span's attributes: the engine and, once
// known, the container's short id.
func (r *Runtime) spanAttrs(id string) []attribute.KeyValue {
	engine := "docker"
	if r.podman {
		engine = "podman"
	}
	a := []attribute.KeyValue{telemetry.KeyRuntime.String(engine)}
	if id != "" {
		a = append(a, telemetry.KeyContainerID.String(shortID(id)))
	}
	return a
}

// Instance is a running container.
type Instance struct {
	r    *Runtime
	spec sandbox.Spec
	id   string
	pid  int
	// pidStart is the init's start time (/proc/pid/stat), to tell it
	// from a later process with its pid.
	pidStart string
	ws       *overlay
	// hold is the container's hold on its change set (nil without a
	// workspace), released once ws is unmounted.
	hold *uppers.Hold
	// egress forwards the container's loopback proxy port to the egress
	// proxy (network mode proxy).
	egress *egressForwarder
	cg     cgroupPaths
	// hostMounts are strings naming the engine's host mounts for the
	// container (its id, rootfs, network namespace file).
	hostMounts []string
	// uid and gid are the container's user, who owns its environment
	// files.
	uid, gid int
	closed   sync.Once
	dead     bool
	mu       sync.Mutex
}

var _ sandbox.Instance = (*Instance)(nil)

func (r *Runtime) start(ctx context.Context, spec sandbox.Spec, ahead bool) (*Instance, error) {
	probe := spec
	if len(probe.Argv) == 0 {
		probe.Argv = []string{"true"}
	}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	switch spec.Network {
	case "", sandbox.NetworkNone:
	case sandbox.NetworkProxy:
		if spec.ProxySocket == "" {
			return nil, fmt.Errorf("%w: network mode proxy needs the egress proxy's socket", sandbox.ErrInvalidSpec)
		}
	default:
		return nil, fmt.Errorf("%w: network mode %q", sandbox.ErrInvalidSpec, spec.Network)
	}
	prof, err := sandbox.ProfileByName(orDefault(spec.Seccomp, "standard"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, err)
	}
	seccompJSON, err := prof.DockerJSON("")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	secOpt, err := r.seccompOpt(seccompJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp profile: %w", sandbox.ErrSetup, err)
	}
	inst := &Instance{r: r, spec: spec}
	labels := map[string]string{LabelManaged: "1", LabelSession: r.opts.Session, LabelTemplate: r.opts.Template, LabelOwner: r.owner}
	var mounts []mount.Mount
	user := "65534:65534"
	if spec.Workspace != "" {
		if inst.hold, err = r.holdUpper(ctx, spec.ChangeSet, ahead); err != nil {
			return nil, err
		}
		ov, err := mountOverlay(r.opts.StateDir, r.owner, spec.Workspace, spec.ChangeSet, overlayOptions{readOnly: spec.WorkspaceReadOnly, userXattr: r.opts.UserXattr})
		if err != nil {
			inst.hold.Release()
			return nil, err
		}
		inst.ws = ov
		labels[LabelMount], labels[LabelWork] = ov.merged, ov.work
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: ov.merged, Target: spec.Workspace, ReadOnly: spec.WorkspaceReadOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}})
		var st syscall.Stat_t
		if err := syscall.Stat(spec.Workspace, &st); err == nil {
			user = fmt.Sprintf("%d:%d", st.Uid, st.Gid)
		}
	}
	for _, m := range spec.Mounts {
		tgt := orDefault(m.Target, m.Source)
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: tgt, ReadOnly: !m.Writable,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}})
	}
	inst.uid, inst.gid = parseUser(user)
	tmpSize := spec.TmpSize
	if tmpSize <= 0 {
		tmpSize = 64 << 20
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true", secOpt},
		Tmpfs: map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmpSize),
			// A command's variables that carry a secret (envfile.go):
			// its user may remove a file but not list them (Podman
			// takes no uid= for a tmpfs).
			envDir: "rw,nosuid,nodev,noexec,size=1m,mode=1733"},
		Mounts:       mounts,
		Init:         ptr(true),
		IpcMode:      "private",
		CgroupnsMode: container.CgroupnsModePrivate,
		LogConfig:    container.LogConfig{Type: "none"},
	}
	if r.podman {
		// Podman's compatible API mounts writable tmpfs on /run and
		// /var/tmp of a read-only container (its --read-only-tmpfs,
		// which the Docker API cannot turn off): cover them read-only.
		for _, p := range []string{"/run", "/var/tmp"} {
			hc.Tmpfs[p] = "ro,nosuid,nodev,noexec,size=64k"
		}
	}
	// The OOM killer's first choice, as a native sandbox
	// (nsinit.OOMScoreAdj).
	hc.OomScoreAdj = 1000
	lim := spec.Limits
	if lim.Pids > 0 {
		hc.PidsLimit = ptr(int64(lim.Pids) + 2) // + the init and its sleep
	}
	if lim.Memory > 0 {
		hc.Memory, hc.MemorySwap = lim.Memory, lim.Memory
	}
	if r.opts.CPUs > 0 {
		hc.NanoCPUs = int64(r.opts.CPUs * 1e9)
	}
	if lim.CPU > 0 {
		s := int64((lim.CPU + time.Second - 1) / time.Second)
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "cpu", Soft: s, Hard: s})
	}
	if lim.FileSize > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "fsize", Soft: lim.FileSize, Hard: lim.FileSize})
	}
	if lim.OpenFiles > 0 {
		n := int64(lim.OpenFiles)
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nofile", Soft: n, Hard: n})
	}
	// Podman asks runc for rlimits above its own hard limits, which
	// fails without CAP_SYS_RESOURCE (a VM, a nested engine): name nofile
	// and nproc explicitly, at the engine's own hard limits.
	for _, rl := range r.engineLimits {
		if rl.Name == "nofile" && lim.OpenFiles > 0 {
			continue
		}
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: rl.Name, Soft: rl.Soft, Hard: rl.Hard})
	}
	cfg := &container.Config{
		Image:           orDefault(spec.Image, r.opts.Image),
		Cmd:             []string{"sleep", "2147483647"},
		Env:             []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:            user,
		WorkingDir:      "/",
		Labels:          labels,
		NetworkDisabled: true,
		StopSignal:      "SIGKILL",
	}
	// The engine client's own HTTP spans nest under the lifecycle spans.
	cctx, sp := telemetry.StartChild(ctx, telemetry.SpanContainerCreate, trace.SpanKindClient, r.spanAttrs("")...)
	created, err := r.cli.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
	if err != nil {
		sp.Fail(err)
		sp.End()
		inst.ws.release()
		inst.hold.Release()
		return nil, fmt.Errorf("%w: creating the container: %w", sandbox.ErrSetup, err)
	}
	inst.id = created.ID
	sp.Set(telemetry.KeyContainerID.String(shortID(inst.id)))
	sp.End()
	info, err := r.startContainer(ctx, inst.id)
	if err != nil {
		inst.Close()
		return nil, err
	}
	inst.pid = info.Container.State.Pid
	if inst.pidStart, err = procStart(inst.pid); err != nil {
		inst.Close()
		return nil, fmt.Errorf("%w: the container's init: %w", sandbox.ErrSetup, err)
	}
	// The host mounts the engine made for this container, to wait for
	// their removal in Close.
	inst.hostMounts = []string{inst.id}
	if gd := info.Container.GraphDriver; gd != nil && gd.Data["MergedDir"] != "" {
		inst.hostMounts = append(inst.hostMounts, gd.Data["MergedDir"])
	}
	if ns := info.Container.NetworkSettings; ns != nil && ns.SandboxKey != "" {
		inst.hostMounts = append(inst.hostMounts, ns.SandboxKey)
	}
	inst.cg = findCgroups(inst.pid)
	if spec.Network == sandbox.NetworkProxy {
		if inst.egress, err = startEgress(inst.pid, inst.pidStart, spec.ProxySocket); err != nil {
			inst.Close()
			return nil, err
		}
	}
	r.log.Debug("container started", "id", shortID(inst.id), "pid", inst.pid, "workspace", spec.Workspace)
	return inst, nil
}

// ID is the container's id.
func (in *Instance) ID() string { return in.id }

// Exec runs argv in the container with the spec's environment, directory
// and output limit. When the wall-clock limit elapses the whole container
// is killed (the engine cannot kill one exec'd process tree) and the
// instance is unusable afterwards.
func (in *Instance) Exec(ctx context.Context, argv []string) (sandbox.Result, error) {
	c := callOf(in.spec)
	c.argv, c.stdin = argv, nil
	return in.exec(ctx, c)
}

// Run runs spec's command in the container with spec's own environment,
// directory, standard streams, wall-clock and output limits. The rest of
// spec (workspace, change set, mounts, seccomp, the other limits) is the
// container's, fixed when it started: the caller checks SameContainer.
// Network mode proxy is the command's own when the container was started
// without it: the forwarder is opened in the container's network
// namespace for this command and closed before Run returns, so nothing of
// one command's proxy is left for a later one.
func (in *Instance) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	if spec.Network == sandbox.NetworkProxy && in.spec.Network != sandbox.NetworkProxy {
		in.mu.Lock()
		dead := in.dead || in.pid == 0
		in.mu.Unlock()
		if dead {
			return sandbox.Result{}, fmt.Errorf("%w: the container is gone: no network namespace to open the proxy's port in", sandbox.ErrSetup)
		}
		f, err := startEgress(in.pid, in.pidStart, spec.ProxySocket)
		if err != nil {
			return sandbox.Result{}, err
		}
		defer f.stop()
	}
	return in.exec(ctx, callOf(spec))
}

// call is what one command brings to a container; everything else is the
// container's.
type call struct {
	argv, env      []string
	dir, workspace string
	stdin          io.Reader
	stdout, stderr io.Writer
	wall           time.Duration
	output         int64
	live           bool
	// scratch is the spec's Scratch: the output is read into it.
	scratch sandbox.Scratch
}

func callOf(spec sandbox.Spec) call {
	env := spec.Env
	if spec.Network == sandbox.NetworkProxy {
		env = withoutEgressSocket(env)
	}
	return call{argv: spec.Argv, env: env, dir: spec.Dir, workspace: spec.Workspace, stdin: spec.Stdin,
		stdout: spec.Stdout, stderr: spec.Stderr, wall: spec.Limits.Wall, output: spec.Limits.Output, live: spec.Live, scratch: spec.Scratch}
}

// SameContainer reports whether a container started for a can run b's
// command exactly as a container started for b would: they differ at
// most in what each command brings (argv, environment, directory,
// standard streams, wall-clock and output limits, and network mode proxy
// with its socket when a has no network: the engine's side of both is
// "none", and Instance.Run opens b's forwarder for b's command only).
func SameContainer(a, b sandbox.Spec) bool {
	la, lb := a.Limits, b.Limits
	la.Wall, lb.Wall, la.Output, lb.Output = 0, 0, 0, 0
	return a.Image == b.Image && a.Workspace == b.Workspace && a.ChangeSet == b.ChangeSet && a.ChangeSetSize == b.ChangeSetSize && a.WorkspaceReadOnly == b.WorkspaceReadOnly &&
		slices.Equal(a.Mounts, b.Mounts) && a.TmpSize == b.TmpSize && sameNetwork(a, b) &&
		orDefault(a.Seccomp, "standard") == orDefault(b.Seccomp, "standard") && la == lb
}

// sameNetwork reports whether a container started for a can give b's
// command b's network: the same, or none for a and the proxy for b.
func sameNetwork(a, b sandbox.Spec) bool {
	an, bn := a.Network, b.Network
	if an == "" {
		an = sandbox.NetworkNone
	}
	if bn == "" {
		bn = sandbox.NetworkNone
	}
	if an == sandbox.NetworkNone && bn == sandbox.NetworkProxy {
		return true
	}
	return an == bn && a.ProxySocket == b.ProxySocket
}

func (in *Instance) exec(ctx context.Context, c call) (sandbox.Result, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var res sandbox.Result
	if in.dead {
		return res, fmt.Errorf("%w: the container was killed by an earlier limit", sandbox.ErrSetup)
	}
	argv, stdin := c.argv, c.stdin
	if len(argv) == 0 || argv[0] == "" {
		return res, fmt.Errorf("%w: no command", sandbox.ErrInvalidSpec)
	}
	t0 := time.Now()
	dir := c.dir
	if dir == "" {
		dir = orDefault(c.workspace, "/")
	}
	before := in.cg.events()
	runCtx := ctx
	var cancel context.CancelFunc
	if c.wall > 0 {
		runCtx, cancel = context.WithTimeout(ctx, c.wall)
		defer cancel()
	}
	held, env := splitEnv(c.env, c.scratch)
	if len(held) > 0 {
		ef, err := writeEnvFile(in.pid, in.pidStart, in.uid, in.gid, envContent(held, c.scratch))
		if err != nil {
			return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		defer func() {
			if err := ef.wipe(); err != nil {
				in.r.log.Warn("a secret's environment file could not be zeroed", "container", shortID(in.id), "err", err)
			}
		}()
		argv = append([]string{envShell, "-c", envScript, "fluffy-env", ef.path()}, argv...)
	}
	if stdin != nil {
		sf, err := writeStdinFile(in.pid, in.pidStart, in.uid, in.gid, stdin)
		if err != nil {
			return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		if sf != nil {
			defer func() {
				if err := sf.wipe(); err != nil {
					in.r.log.Warn("a command's stdin file could not be zeroed", "container", shortID(in.id), "err", err)
				}
			}()
			argv = append([]string{envShell, "-c", stdinScript, "fluffy-stdin", sf.path()}, argv...)
			stdin = nil
		}
	}
	ex, err := in.r.cli.ExecCreate(runCtx, in.id, client.ExecCreateOptions{
		Cmd: argv, Env: env, WorkingDir: dir, AttachStdout: true, AttachStderr: true, AttachStdin: stdin != nil,
	})
	if err != nil {
		return res, fmt.Errorf("%w: exec: %w", sandbox.ErrSetup, err)
	}
	conn, err := in.r.startExec(runCtx, ex.ID)
	if err != nil {
		return res, fmt.Errorf("%w: exec: %w", sandbox.ErrSetup, err)
	}
	defer conn.Close()
	res.Setup = time.Since(t0)
	start := time.Now()
	if stdin != nil {
		go func() {
			_, _ = io.Copy(conn, stdin)
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}()
	}
	limit := c.output
	if limit <= 0 {
		limit = 1 << 20
	}
	stdout := newCapped(limit, c.stdout, c.live, c.scratch)
	stderr := newCapped(limit, c.stderr, c.live, c.scratch)
	rbuf := scratchOr(c.scratch, demuxBuffer)
	done := make(chan error, 1)
	go func() {
		done <- demux(conn, rbuf, stdout, stderr)
	}()
	// copied says the copy's one result was received: it must not be
	// waited for twice (a copy that ended as the context did would
	// otherwise hang the kill path below forever).
	var copyErr error
	copied := false
	select {
	case copyErr = <-done:
		copied = true
	case <-runCtx.Done():
	}
	if runCtx.Err() != nil && !copied {
		select {
		case copyErr = <-done:
			copied = true
		default:
		}
	}
	if runCtx.Err() != nil {
		// Time is up (or the caller cancelled): kill everything. The
		// limits hit before it (a fork bomb stopped by the pids limit that
		// then ran out of time) are read first: the container's cgroup
		// goes with it.
		hit := in.cg.events()
		in.dead = true
		kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = in.r.cli.ContainerKill(kctx, in.id, client.ContainerKillOptions{Signal: "SIGKILL"})
		kcancel()
		conn.Close()
		if !copied {
			<-done
		}
		res.Duration = time.Since(start)
		res.ExitCode, res.Signal = -1, int(syscall.SIGKILL)
		if ctx.Err() == nil {
			res.Killed = sandbox.LimitTime
			res.Hit = append(res.Hit, sandbox.LimitTime)
		}
		if hit.oomKills > before.oomKills {
			res.Hit = append(res.Hit, sandbox.LimitMemory)
		}
		if hit.pidsMax > before.pidsMax {
			res.Hit = append(res.Hit, sandbox.LimitPids)
		}
		res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
		return res, nil
	}
	res.Duration = time.Since(start)
	_ = copyErr
	ins, err := in.r.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return res, fmt.Errorf("%w: exec status: %w", sandbox.ErrSetup, err)
	}
	res.ExitCode = ins.ExitCode
	if ins.ExitCode > 128 && ins.ExitCode < 128+65 {
		// The engine reports a process a signal ended as 128+signal.
		res.Signal, res.ExitCode = ins.ExitCode-128, -1
	}
	if ins.ExitCode == 126 || ins.ExitCode == 127 {
		if notFound(stdout.bytes()) || notFound(stderr.bytes()) {
			return res, fmt.Errorf("%w: %w: %s", sandbox.ErrInvalidSpec, sandbox.ErrCommandNotFound, c.argv[0])
		}
	}
	after := in.cg.events()
	if after.oomKills > before.oomKills {
		res.Hit = append(res.Hit, sandbox.LimitMemory)
		if res.Signal == int(syscall.SIGKILL) {
			res.Killed = sandbox.LimitMemory
		}
	}
	if after.pidsMax > before.pidsMax {
		res.Hit = append(res.Hit, sandbox.LimitPids)
	}
	switch syscall.Signal(res.Signal) {
	case syscall.SIGXCPU:
		res.Killed = sandbox.LimitCPU
		res.Hit = append(res.Hit, sandbox.LimitCPU)
	case syscall.SIGXFSZ:
		res.Killed = sandbox.LimitFileSize
		res.Hit = append(res.Hit, sandbox.LimitFileSize)
	}
	if in.tmpFull() {
		res.Hit = append(res.Hit, sandbox.LimitTmp)
	}
	if stdout.cut || stderr.cut {
		res.Hit = append(res.Hit, sandbox.LimitOutput)
	}
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	return res, nil
}

// tmpFull reports whether the container's /tmp has no space left, read
// from the host through the init's root.
func (in *Instance) tmpFull() bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(fmt.Sprintf("/proc/%d/root/tmp", in.pid), &st); err != nil {
		return false
	}
	return st.Bavail == 0
}

// Stop kills every process in the container and returns once they are
// gone: nothing in it runs or writes any more. Close still removes the
// container and its workspace overlay. It kills the container's init
// from the host: when a PID namespace's init dies the kernel kills every
// other process in it (exec'd commands included) before the init's exit
// is reported, which is much sooner than the engine's own kill and wait.
func (in *Instance) Stop(ctx context.Context) error {
	fd, err := unix.PidfdOpen(in.pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // already gone
		}
		return fmt.Errorf("docker: stopping container %s: pidfd_open: %w", shortID(in.id), err)
	}
	defer unix.Close(fd)
	// The descriptor pins the process: if its start time is not the
	// init's, the init is gone and the pid was reused.
	if st, err := procStart(in.pid); err != nil || st != in.pidStart {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("docker: stopping container %s: %w", shortID(in.id), err)
	}
	for {
		ms := 100
		if d, ok := ctx.Deadline(); ok {
			ms = min(ms, max(int(time.Until(d).Milliseconds()), 0))
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		switch {
		case n > 0:
			return nil
		case err != nil && !errors.Is(err, unix.EINTR):
			return fmt.Errorf("docker: stopping container %s: poll: %w", shortID(in.id), err)
		case ctx.Err() != nil:
			return fmt.Errorf("docker: stopping container %s: %w", shortID(in.id), ctx.Err())
		}
	}
}

// Close kills and removes the container and unmounts the workspace
// overlay. It is safe to call more than once.
func (in *Instance) Close() error {
	var err error
	in.closed.Do(func() {
		in.egress.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if in.id != "" {
			if _, e := in.r.cli.ContainerRemove(ctx, in.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); e != nil && !isNotFound(e) {
				err = fmt.Errorf("docker: removing container %s: %w", shortID(in.id), e)
			}
		}
		// Engines may unmount a removed container's rootfs and network
		// namespace after the API call returned (Podman's cleanup
		// process does): Close returns once they are gone, so that
		// "closed" means "nothing left on the host".
		waitUnmounted(in.hostMounts, 10*time.Second)
		if e := in.ws.release(); e != nil && err == nil {
			err = e
		}
		// Detached (MNT_DETACH), the overlay takes no new writes: the
		// change set is free even when its directories could not go.
		in.hold.Release()
	})
	return err
}

// holdUpper holds the change set cs in Options.Uppers for a container's
// overlay on it (uppers.go); ahead, a container started ahead of its
// command, waits only for a busy holder.
func (r *Runtime) holdUpper(ctx context.Context, cs string, ahead bool) (*uppers.Hold, error) {
	if err := os.MkdirAll(cs, 0o755); err != nil {
		return nil, fmt.Errorf("%w: change set: %w", sandbox.ErrSetup, err)
	}
	// The native runtime's key: the resolved path.
	key, err := filepath.EvalSymlinks(cs)
	if err != nil {
		return nil, fmt.Errorf("%w: change set: %w", sandbox.ErrSetup, err)
	}
	var h *uppers.Hold
	if ahead {
		h, err = r.opts.Uppers.AcquireAhead(ctx, key)
	} else {
		h, err = r.opts.Uppers.Acquire(ctx, key, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: waiting for the change set %s: %w", sandbox.ErrSetup, key, err)
	}
	return h, nil
}

// waitUnmounted waits, at most limit, until no line of the host's mount
// table contains any of names.
func waitUnmounted(names []string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		found := false
		for _, n := range names {
			if n != "" && bytes.Contains(b, []byte(n)) {
				found = true
				break
			}
		}
		if !found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func isNotFound(err error) bool {
	var nf interface{ NotFound() }
	return errors.As(err, &nf) || strings.Contains(strings.ToLower(err.Error()), "no such container")
}

// peerLimits reads the nofile and nproc hard limits of the process
// serving a local unix socket (SO_PEERCRED, then /proc/pid/limits).
func peerLimits(host string) []container.Ulimit {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil
	}
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || cred.Pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cred.Pid))
	if err != nil {
		return nil
	}
	var out []container.Ulimit
	for _, line := range strings.Split(string(b), "\n") {
		var name string
		switch {
		case strings.HasPrefix(line, "Max open files"):
			name = "nofile"
		case strings.HasPrefix(line, "Max processes"):
			name = "nproc"
		default:
			continue
		}
		f := strings.Fields(line[len("Max processes"):])
		if name == "nofile" {
			f = strings.Fields(line[len("Max open files"):])
		}
		if len(f) < 2 {
			continue
		}
		soft, err1 := strconv.ParseInt(f[0], 10, 64)
		hard, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			out = append(out, container.Ulimit{Name: name, Soft: soft, Hard: hard})
		}
	}
	return out
}

// ownerLabel identifies a process across pid reuse: "pid:starttime".
func ownerLabel(pid int) (string, error) {
	st, err := procStart(pid)
	if err != nil {
		return "", fmt.Errorf("%w: reading own start time: %w", sandbox.ErrSetup, err)
	}
	return strconv.Itoa(pid) + ":" + st, nil
}

// procStart returns field 22 of /proc/pid/stat (start time in ticks).
func procStart(pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", err
	}
	st, ok := parseStatStart(string(b))
	if !ok {
		return "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return st, nil
}

// parseStatStart returns the start time field of a /proc/pid/stat line.
// The command name (field 2) is chosen by the process and may hold spaces
// and parentheses: fields are counted after its last ')'.
func parseStatStart(s string) (string, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", false
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return "", false
	}
	return f[19], true
}
