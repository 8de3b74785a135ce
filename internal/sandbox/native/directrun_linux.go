//go:build amd64 || arm64

package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/reaper"
	"golang.org/x/sys/unix"
)

// directOK says whether a run can start directly (direct_linux.go): not
// a probe or a run through the egress proxy (the init forwards it), and
// only where the child can enter the cgroup as it is cloned and the
// kernel has mount_setattr.
func (r *Runtime) directOK(cfg *nsinit.Config, wantCg bool) bool {
	if r.opts.NoDirect || r.noVfork || cfg.Probe || cfg.ProxySocket != "" {
		return false
	}
	if wantCg && r.cgl.v2 == "" && !r.cgl.v1Threads {
		return false
	}
	if _, err := r.reaperFile(); err != nil {
		return false
	}
	return mountSetattrWorks()
}

// reaperFile returns a sealed memfd holding the reaper (package reaper),
// made once; the direct start's PID 1 executes it by descriptor.
func (r *Runtime) reaperFile() (*os.File, error) {
	r.reaper.once.Do(func() {
		prog := reaper.Program()
		if prog == nil {
			r.reaper.err = errors.New("no reaper for this architecture")
			return
		}
		// Executable explicitly (MFD_EXEC): where vm.memfd_noexec makes
		// memfds non-executable by default. Kernels before 6.3 do not
		// know the flag (EINVAL) and make every memfd executable; where
		// executable memfds are forbidden (EACCES) runs use the Go init.
		fd, err := unix.MemfdCreate("fluffy-sandbox-reaper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
		if err == unix.EINVAL {
			fd, err = unix.MemfdCreate("fluffy-sandbox-reaper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		}
		if err != nil {
			r.reaper.err = fmt.Errorf("memfd for the reaper: %w", err)
			return
		}
		f := os.NewFile(uintptr(fd), "fluffy-sandbox-reaper")
		if _, err := f.Write(prog); err == nil {
			_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
			if err != nil {
				r.reaper.err = fmt.Errorf("seal the reaper's memfd: %w", err)
			}
		} else {
			r.reaper.err = fmt.Errorf("write the reaper's memfd: %w", err)
		}
		if r.reaper.err != nil {
			f.Close()
			return
		}
		r.reaper.f = f
	})
	return r.reaper.f, r.reaper.err
}

// startDirect does what run does between the spec's checks and the
// start (the cgroup, the rlimits, the output's writers) for a direct
// start, and runs it.
func (r *Runtime) startDirect(ctx context.Context, cfg *nsinit.Config, spec sandbox.Spec, res sandbox.Result, early func(sandbox.Result), gate func() error,
	tr *nsinit.Tracer, stOut *nsinit.Status) (sandbox.Result, error) {
	lim := spec.Limits
	var cg *cgroup
	if r.wantsCgroup(lim) {
		var err error
		if cg, err = newCgroup(r.cgl, lim.Memory, lim.Pids); err != nil {
			res.Warnings = append(res.Warnings, "no cgroup for this run: "+err.Error())
			cg = nil
		}
	}
	tr.Mark("cgroup created")
	res.Warnings = append(res.Warnings, addRlimits(cfg, lim, cg != nil)...)
	cfg.LowerFD = r.lowerFD(cfg)
	var stdin io.Reader
	if spec.Stdin != nil {
		// Never the caller's terminal (TIOCSTI and friends): a pipe.
		stdin = pipedStdin{spec.Stdin}
	}
	stdout := newCapWriter(lim.Output, spec.Stdout, spec.Scratch, spec.Live)
	stderr := newCapWriter(lim.Output, spec.Stderr, spec.Scratch, spec.Live)
	return r.runDirect(ctx, cfg, res, lim, cg, stdin, stdout, stderr, gate, early, tr, stOut, spec.Scratch)
}

// idmapNS returns a user namespace that maps uid and gid 0 to this
// Runtime's sandbox ids, for the idmapped trees of a direct start (the
// sandbox's own does not exist before its clone, whose child then
// cannot wait for them). It is made once, by a child that sends its own.
func (r *Runtime) idmapNS() (int, error) {
	r.idmap.once.Do(func() { r.idmap.fd, r.idmap.err = r.makeIdmapNS() })
	return r.idmap.fd, r.idmap.err
}

func (r *Runtime) makeIdmapNS() (int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pair[0])
	child := os.NewFile(uintptr(pair[1]), "nssock")
	defer child.Close()
	p := &childProg{}
	o := childOp{nr: unix.SYS_OPENAT, a: [6]uintptr{uintptr(atFDCWD), 0, unix.O_RDONLY | unix.O_CLOEXEC}, out: 1}
	o.p[1] = p.str("/proc/self/ns/user")
	p.add("userns", "open /proc/self/ns/user", o)
	p.sendFD("userns", "send the user namespace", 3, 1)
	p.call("userns", "exit", unix.SYS_EXIT_GROUP, 0)
	hostUID, hostGID := r.hostIDs()
	cmd := &exec.Cmd{
		Path: "/", Args: []string{"idmap"}, Stdout: io.Discard, Stderr: io.Discard,
		ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostGID, Size: 1}},
		},
	}
	vp := &vforkProcess{cmd: cmd, prog: p}
	if _, err := startOnThread(nil, nil, nil, vp.Start, vp.Reusable, closedChan); err != nil {
		return -1, fmt.Errorf("user namespace for the idmapped trees: %w", err)
	}
	_ = vp.Wait()
	return receiveUserNS(pair[0])
}

// closedChan lets startOnThread give its thread back at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// runDirect runs cfg by a direct start; run has done everything up to
// the start (facilities, paths, limits, the cgroup cg, the output's
// writers). It owns cg from here.
func (r *Runtime) runDirect(ctx context.Context, cfg *nsinit.Config, res sandbox.Result, lim sandbox.Limits, cg *cgroup, stdin io.Reader,
	stdout, stderr *capWriter, gate func() error, early func(sandbox.Result), tr *nsinit.Tracer, stOut *nsinit.Status, sc sandbox.Scratch) (sandbox.Result, error) {
	d, err := r.buildDirect(cfg, cg, stdin, stdout, stderr, directOpts{gated: gate != nil, pid1Pause: r.pid1Pause, scratch: sc}, tr)
	if err != nil {
		if errors.Is(err, sandbox.ErrInvalidSpec) {
			return res, err
		}
		return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	return d.finish(ctx, res, lim, stdout, stderr, gate, early, tr, stOut)
}

// directStart is a direct start from its clone on: PID 1 building the
// sandbox (then, gated, waiting for its release on directGate), and this
// process's ends of it. finish runs it to its end; an ahead start
// (ahead_linux.go) is finished by the run that takes it, or discarded.
type directStart struct {
	r    *Runtime
	prog *childProg
	vp   *vforkProcess
	cg   *cgroup
	// gated: PID 1 waits for the release before it makes the command's
	// process.
	gated bool
	// stR carries the reaper's report; gate is this process's end of
	// directGate.
	stR, gate *os.File
	netFD     int
	// ended lets the thread that cloned PID 1 go (Pdeathsig follows it).
	ended chan struct{}
	// started receives the clone's outcome once it has returned (PID 1
	// executing the reaper, the command its own exec) or failed.
	started chan startOutcome
	// start is when the command's run began (a duration's and a wall
	// limit's origin).
	start time.Time
	once  sync.Once
	// tid is the thread that clones PID 1 (killPID1).
	tid atomic.Int32
}

type startOutcome struct {
	entered bool
	err     error
}

// buildDirect starts building the sandbox of cfg: it prepares PID 1's
// program and descriptors and clones it, on a thread of its own, and
// returns while PID 1 still works. The start owns cg from here (close
// removes it).
func (r *Runtime) buildDirect(cfg *nsinit.Config, cg *cgroup, stdin io.Reader, stdout, stderr io.Writer, o directOpts, tr *nsinit.Tracer) (d *directStart, err error) {
	// built, not the named result: a failure returns nil for d, and the
	// cleanup below must still close what was built.
	built := &directStart{r: r, cg: cg, gated: o.gated || o.ahead, netFD: -1, ended: make(chan struct{}), started: make(chan startOutcome, 1)}
	d = built
	// The child's ends (its descriptors from 3 on), closed here once it
	// holds them; everything else by close.
	var childEnds []*os.File
	cgFD := -1
	defer func() {
		if err != nil {
			for _, f := range childEnds {
				f.Close()
			}
			if cgFD >= 0 {
				unix.Close(cgFD)
			}
			built.close()
		}
	}()
	var trees []int
	if cfg.LowerFD {
		ns, err := r.idmapNS()
		if err == nil {
			trees, err = idmappedTrees(ns, cfg.Workspace, filepath.Dir(cfg.Upper), cfg.Mounts)
		}
		if err != nil {
			return nil, fmt.Errorf("idmapped workspace: %w", err)
		}
	}
	for _, fd := range trees {
		childEnds = append(childEnds, os.NewFile(uintptr(fd), "tree"))
	}
	o.trees = len(trees)
	if d.prog, err = directProg(cfg, o); err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	d.stR = stR
	childEnds = append(childEnds, stW)
	pidR, pidW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	childEnds = append(childEnds, pidR, pidW)
	reaperF, err := r.reaperFile()
	if err != nil {
		return nil, err
	}
	gateChild, gateParent, err := gateSockets()
	if err != nil {
		return nil, err
	}
	d.gate = gateParent
	childEnds = append(childEnds, gateChild)
	extra := append([]*os.File{nil, stW, reaperF, pidR, pidW, gateChild}, childEnds[:len(trees)]...)
	cmd := r.directCmd(stdin, stdout, stderr, extra)
	if cg != nil && cg.v2 {
		if cgFD, err = unix.Open(cg.dirs[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgFD
	}
	// ForkLock goes once the child's id maps are written (its first op
	// says so), when nothing of PID 1 needs it later (direct_linux.go).
	var handoff *forkHandoff
	if d.prog.handsOff {
		handoff = &forkHandoff{}
		go func() {
			var b [1]byte
			if n, _ := gateParent.Read(b[:]); n == 1 {
				handoff.release()
			}
		}()
	}
	// The cloning thread enters what the child must be born in: a v1
	// cgroup (cgroup.startInside), a network namespace made ahead
	// (netns_linux.go).
	var enter, leave []func() error
	var leaveAfter func() error
	if cg != nil && !cg.v2 {
		in, out := cg.threadMoves(r.cgl)
		enter, leave = append(enter, in), append(leave, out)
	}
	if d.netFD = r.takeNetNS(); d.netFD >= 0 {
		cmd.SysProcAttr.Cloneflags &^= syscall.CLONE_NEWNET
		netFD := d.netFD
		enter = append(enter, func() error { return r.enterNetNS(netFD) })
		leaveAfter = r.leaveNetNS
	}
	if tr.On {
		d.prog.times = make([]int64, len(d.prog.ops))
	}
	tr.Mark("program built, descriptors")
	d.vp = &vforkProcess{cmd: cmd, prog: d.prog, handoff: handoff}
	d.start = time.Now()
	ends, fd := childEnds, cgFD
	childEnds, cgFD = nil, -1
	start := func() error {
		d.tid.Store(int32(unix.Gettid()))
		return d.vp.Start()
	}
	startOnThreadThen(allOf(enter), allOf(leave), leaveAfter, start, d.vp.Reusable, d.ended, func(entered bool, err error) {
		d.started <- startOutcome{entered, err}
		for _, f := range ends {
			f.Close()
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	})
	return d, nil
}

// directCmd is the clone of a direct start's PID 1 with extra as its
// descriptors from 3 on (its program, not the command's Path, runs in
// it).
func (r *Runtime) directCmd(stdin io.Reader, stdout, stderr io.Writer, extra []*os.File) *exec.Cmd {
	hostUID, hostGID := r.hostIDs()
	return &exec.Cmd{
		Path: "/", Args: []string{"fluffy-sandbox"},
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  sandboxNamespaces,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostGID, Size: 1}},
			Setsid:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
}

// killPID1 kills PID 1 while its clone has not returned (no pidfd yet):
// it is the child of the thread that cloned it, which waits for it.
func (d *directStart) killPID1() {
	tid := d.tid.Load()
	if tid == 0 {
		return
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", tid))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// awaitClone waits for PID 1's clone to return (the command started, or
// PID 1 failed). A PID 1 that never gets there (stopped with SIGSTOP
// while it waited at the gate, say) is killed when ctx ends or the wall
// limit passes (wallKilled): the run then ends as a cancelled or
// timed-out one.
func (d *directStart) awaitClone(ctx context.Context, wall time.Duration, start time.Time) (o startOutcome, wallKilled bool) {
	select {
	case o := <-d.started:
		return o, false
	default:
	}
	var deadline <-chan time.Time
	if wall > 0 {
		t := time.NewTimer(wall - time.Since(start))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case o := <-d.started:
		return o, false
	case <-ctx.Done():
	case <-deadline:
		wallKilled = true
	}
	d.killPID1()
	return <-d.started, wallKilled
}

// release lets a gated PID 1 go on (b releaseGo) or makes it fail.
func (d *directStart) release(b byte) { _, _ = d.gate.Write([]byte{b}) }

// close releases this process's ends of the start and its cgroup; the
// start must be over (finish), or have failed. Later calls do nothing.
func (d *directStart) close() {
	d.once.Do(func() {
		close(d.ended)
		if d.gate != nil {
			// A read still waiting ends (the start is over).
			d.gate.Close()
		}
		if d.stR != nil {
			d.stR.Close()
		}
		if d.netFD >= 0 {
			unix.Close(d.netFD)
		}
		if d.cg != nil {
			if err := d.cg.remove(); err != nil {
				d.r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
			}
		}
	})
}

// finish runs a built start to its end: the gate (PID 1 is released
// when it passes), the command, the reaper's report, the teardown.
func (d *directStart) finish(ctx context.Context, res sandbox.Result, lim sandbox.Limits, stdout, stderr *capWriter, gate func() error,
	early func(sandbox.Result), tr *nsinit.Tracer, stOut *nsinit.Status) (sandbox.Result, error) {
	r, prog, vp, start := d.r, d.prog, d.vp, d.start
	defer d.close()
	setupErr := func(err error) (sandbox.Result, error) {
		return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	g := d.runGate(ctx, gate)
	// Never return before the gate has: its caller reads its result.
	defer func() { <-g.done }()
	o, wallKilled := d.awaitClone(ctx, lim.Wall, start)
	entered, err := o.entered, o.err
	if tr.On {
		tr.Mark("clone returned (command running)")
		stOut.Marks = prog.marks()
		if gate != nil {
			<-g.done
			tr.Marks = append(tr.Marks, nsinit.Mark{Stage: "gate passed (exec.start recorded)", At: g.at})
		}
	}
	if !entered {
		return setupErr(fmt.Errorf("prepare the cloning thread: %w", err))
	}
	if err != nil {
		var oe *opError
		if d.gated && errors.As(err, &oe) && oe.Stage == "gate" {
			// Not released: the gate refused, or the run was cancelled
			// first.
			select {
			case <-g.done:
				if g.err != nil {
					return setupErr(g.err)
				}
			default:
			}
			return res, fmt.Errorf("sandbox: %w", ctx.Err())
		}
		return res, r.directStartError(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A timeout or cancellation kills PID 1, and with it the namespace.
	timedOut, done := watchdog(runCtx, lim.Wall, start, func() { _ = vp.Signal(syscall.SIGKILL) })
	st, stErr := d.readReport()
	tr.Mark("reaper's report (all ended)")
	cg := d.cg
	var oomKills, pidsMax int
	readEvents := func() {
		if cg != nil {
			oomKills, pidsMax = cg.events()
		}
	}
	if stErr == nil {
		readEvents()
		if early != nil {
			r.reportEarlyStatus(early, vp, st, &res, start, timedOut, cg != nil, oomKills, pidsMax, stdout, stderr)
		}
	}
	_ = vp.Wait()
	tr.Mark("PID 1 reaped (pid/net ns gone)")
	if stErr != nil {
		readEvents()
	}
	close(done)
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	gotStatus := stErr == nil
	select {
	case <-timedOut:
		markTimedOut(&res)
	default:
		if wallKilled {
			markTimedOut(&res)
		}
	}
	if res.Killed == "" && !gotStatus {
		if err := unreported(ctx, &res, cg != nil, oomKills); err != nil {
			if errors.Is(err, errNoReport) {
				err = fmt.Errorf("%w: the sandbox's reaper ended without a report (%v; PID 1's wait status %v)", sandbox.ErrSetup, stErr, vp.status)
			}
			return res, err
		}
	}
	applyStatus(&res, st, gotStatus, cg != nil, oomKills, pidsMax, stdout.cut() || stderr.cut())
	return res, nil
}

// gateRun is a run's gate (exec.start recorded) running while the
// sandbox is built. done is closed when it has returned; err and at
// (its end, for the trace) are set before.
type gateRun struct {
	done chan struct{}
	err  error
	at   int64
}

// runGate runs gate while PID 1 builds the sandbox; PID 1 waits for its
// verdict on directGate before the command's process is made
// (direct_linux.go). A start without a gate that PID 1 waits at anyway
// (gated) is released at once.
func (d *directStart) runGate(ctx context.Context, gate func() error) *gateRun {
	g := &gateRun{done: make(chan struct{})}
	switch {
	case gate != nil:
		go func() {
			defer close(g.done)
			g.err = gate()
			g.at = nsinit.MonoNow()
		}()
		go func() {
			b := releaseStop
			select {
			case <-g.done:
				if g.err == nil {
					b = releaseGo
				}
			case <-ctx.Done():
			}
			d.release(b)
		}()
	case d.gated:
		close(g.done)
		d.release(releaseGo)
	default:
		close(g.done)
	}
	return g
}

// readReport reads the reaper's report, which comes once everything but
// the reaper is gone, as the command's status.
func (d *directStart) readReport() (nsinit.Status, error) {
	var buf [reaper.ReportSize]byte
	_, err := io.ReadFull(d.stR, buf[:])
	rep, _ := reaper.ParseReport(buf[:])
	if err == nil && !rep.Reaped {
		err = errors.New("the reaper did not see the command end")
	}
	st := nsinit.Status{Started: true, TmpFull: rep.TmpFull, UpperFull: rep.UpperFull}
	if b := d.prog.upperBase; b != nil && rep.UpperInodes != 0 {
		st.UpperWritten = uint64(rep.UpperInodes) > b.Files-b.Ffree
	}
	ws := unix.WaitStatus(rep.WaitStatus)
	if ws.Signaled() {
		st.ExitCode, st.Signal = -1, int(ws.Signal())
	} else {
		st.ExitCode = ws.ExitStatus()
	}
	return st, err
}

// allOf returns a function that runs fns in order and stops at the
// first error, or nil when there is none.
func allOf(fns []func() error) func() error {
	if len(fns) == 0 {
		return nil
	}
	return func() error {
		for _, fn := range fns {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	}
}

// directStartError turns a failed direct start into run's errors.
func (r *Runtime) directStartError(err error) error {
	var oe *opError
	if errors.As(err, &oe) {
		switch oe.Stage {
		case "overlay":
			f := r.facility("overlay-userns")
			f.Available = false
			f.Detail = "mounting the workspace overlay failed: " + oe.Error()
			f.Fix = overlayFix
			return &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		case "command", "chdir":
			if oe.Stage == "command" && oe.Errno == syscall.ENOENT {
				return fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, &notFoundError{msg: oe.Error()})
			}
			return fmt.Errorf("%w: %s", sandbox.ErrInvalidSpec, oe.Error())
		}
		return fmt.Errorf("%w: %s: %s", sandbox.ErrSetup, oe.Stage, oe.Error())
	}
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
		f := r.facility("userns")
		f.Available = false
		f.Detail = "creating the namespaces failed: " + err.Error()
		f.Fix = userNSFix
		return &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
	}
	return fmt.Errorf("%w: start the sandbox: %w", sandbox.ErrSetup, err)
}

// gateSockets returns the two ends of directGate: the child's, blocking
// (PID 1 waits in its read), and the parent's, for Go's poller.
func gateSockets() (child, parent *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gate socket pair: %w", err)
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("gate socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "gate"), os.NewFile(uintptr(fds[1]), "gate"), nil
}
