package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// The Go init's start modes (vfork, stage-1, exec): runInit prepares the
// cgroup and the init's stdio, launch starts the init, supervise runs it
// to its end.

// sandboxProc is a started Go init and this process's ends of it.
type sandboxProc struct {
	proc initProcess
	mode startMode
	cg   *cgroup
	// cfgW carries the configuration and the release byte; stR the
	// init's status.
	cfgW, stR *os.File
	// cfgWritten receives the configuration's write error (or nil) once
	// it is written; cfgPending says that is still to be received.
	cfgWritten   chan error
	cfgPending   bool
	fdSockParent int
	// ended is closed when the sandbox is over: the thread that cloned
	// the init (whose exit would send it the parent-death signal) is
	// held until then.
	ended chan struct{}
	// start is when the run began (a duration's and a wall limit's
	// origin).
	start time.Time
	// watchdogDone stops the run's watchdog (nil while none runs).
	watchdogDone chan struct{}
}

// initIO is what a Go init is given beside its status and configuration
// pipes.
type initIO struct {
	// stdin is the command's stdin (nil: /dev/null); never the caller's
	// terminal.
	stdin          io.Reader
	stdout, stderr *capWriter
	// fdSock gives the init the socket on which the idmapped trees come
	// (nsinit.Config.LowerFD).
	fdSock bool
	// proxy is the egress proxy's socket (fd nsinit.ProxyFD), or nil.
	proxy *os.File
	// cfg is the framed configuration, in the spec's Scratch when it has
	// one: the command's environment may hold a secret's value.
	cfg []byte
}

// scratchBytes is sc's allocator, or nil without one.
func scratchBytes(sc sandbox.Scratch) func(int) []byte {
	if sc == nil {
		return nil
	}
	return sc.Bytes
}

// runInit runs cfg under the Go init: the cgroup (where wanted and the
// host allows one), the rlimits, the start (launch), then supervise.
func (r *Runtime) runInit(ctx context.Context, req *request, cfg *nsinit.Config, proxyF *os.File, res sandbox.Result) (sandbox.Result, startMode, error) {
	lim := req.spec.Limits
	var cg *cgroup
	if r.wantsCgroup(lim) {
		var err error
		if cg, err = newCgroup(r.cgl, lim.Memory, lim.Pids); err != nil {
			res.Warnings = append(res.Warnings, "no cgroup for this run: "+err.Error())
			cg = nil
		}
		req.tr.Mark("cgroup created")
	}
	res.Warnings = append(res.Warnings, addRlimits(cfg, lim, cg != nil)...)
	cfg.LowerFD = r.lowerFD(cfg)
	o := initIO{
		stdout: newCapWriter(lim.Output, req.spec.Stdout, req.spec.Scratch, req.spec.Live),
		stderr: newCapWriter(lim.Output, req.spec.Stderr, req.spec.Scratch, req.spec.Live),
		fdSock: cfg.LowerFD,
		proxy:  proxyF,
		cfg:    cfg.Framed(scratchBytes(req.spec.Scratch)),
	}
	if req.spec.Stdin != nil {
		// Never hand the sandbox the caller's terminal (TIOCSTI and
		// friends): always a pipe.
		o.stdin = pipedStdin{req.spec.Stdin}
	}
	start := time.Now()
	sp, err := r.launch(cg, o, req.tr)
	if err != nil {
		return res, 0, err
	}
	sp.start = start
	defer func() {
		if err := sp.close(); err != nil {
			r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
		}
	}()
	res, err = r.supervise(ctx, req, cfg, sp, res, o)
	return res, sp.mode, err
}

// kill ends the sandbox. Stage 1 is asked to (SIGTERM): it kills the
// init and ends once the init, and with it the PID namespace, is gone.
func (sp *sandboxProc) kill() {
	if sp.mode == modeStage1 {
		_ = sp.proc.Signal(syscall.SIGTERM)
	} else {
		_ = sp.proc.Signal(syscall.SIGKILL)
	}
}

// abort gives up a started sandbox: it kills the init, reaps it and
// stops the watchdog. Every path that ends a run early goes through it.
func (sp *sandboxProc) abort() {
	sp.kill()
	_ = sp.proc.Wait()
	sp.stopWatchdog()
}

// stopWatchdog stops the run's watchdog, if one runs.
func (sp *sandboxProc) stopWatchdog() {
	if sp.watchdogDone != nil {
		close(sp.watchdogDone)
		sp.watchdogDone = nil
	}
}

// writeConfig writes the framed configuration: at once when the pipe
// holds it, otherwise while the init reads it. cfgWritten receives the
// outcome.
func (sp *sandboxProc) writeConfig(msg []byte) {
	sp.cfgPending = true
	if n, err := unix.FcntlInt(sp.cfgW.Fd(), unix.F_GETPIPE_SZ, 0); err == nil && n > len(msg) {
		_, err := sp.cfgW.Write(msg)
		sp.cfgWritten <- err
		return
	}
	go func() {
		_, err := sp.cfgW.Write(msg)
		sp.cfgWritten <- err
	}()
}

// configWritten waits for the configuration's write and returns its
// error.
func (sp *sandboxProc) configWritten() error {
	if !sp.cfgPending {
		return nil
	}
	sp.cfgPending = false
	return <-sp.cfgWritten
}

// close closes this process's ends of a sandbox whose init has been
// reaped (or never started), lets the thread that cloned it go and
// removes its cgroup. A configuration write still under way ends first
// (no reader is left, so it fails at once): its memory, the spec's
// Scratch, is wiped by its holder once the run has returned.
func (sp *sandboxProc) close() error {
	_ = sp.configWritten()
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
	if sp.cg != nil {
		return sp.cg.remove()
	}
	return nil
}

// launch starts a Go init: the pipes and sockets it is given, the clone
// into its namespaces (and its cgroup) and the exec. The configuration
// is written before the init starts (when the pipe holds it), so the
// init reads it as soon as its runtime is up and builds its root while
// this process joins it to the cgroup and sends the idmapped trees. The
// sandbox owns cg from here (close removes it, also when launch fails).
func (r *Runtime) launch(cg *cgroup, o initIO, tr *nsinit.Tracer) (sp *sandboxProc, err error) {
	// built, not the named result: a failure returns nil for sp, and the
	// cleanup below must still close what was built.
	built := &sandboxProc{cg: cg, fdSockParent: -1, cfgWritten: make(chan error, 1), ended: make(chan struct{})}
	sp = built
	// The init's ends, closed once it holds them (or the start failed).
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			if err := built.close(); err != nil {
				r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
			}
		}
	}()
	var extra []*os.File
	extra, childEnds, err = sp.open(o, r.opts.Init)
	if err != nil {
		return nil, err
	}
	sp.writeConfig(o.cfg)
	tr.Mark("pipes, binary opened")
	newCmd := func(stage1 bool) *exec.Cmd { return r.initCmd(o, extra, stage1) }
	join, err := r.startInit(sp, newCmd, tr)
	if err != nil {
		return nil, err
	}
	if join == joinAfter {
		if err := cg.add(sp.proc.Pid()); err != nil {
			sp.abort()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		tr.Mark("cgroup joined")
	}
	return sp, nil
}

// open makes the pipes and sockets of a Go init and opens its binary. It
// returns the init's descriptors from 3 on (exec.Cmd.ExtraFiles: the
// configuration, the status, the idmapped trees' socket, the binary, the
// egress proxy's socket) and those of them to close once it holds them.
func (sp *sandboxProc) open(o initIO, binary string) (extra, childEnds []*os.File, err error) {
	stR, stW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	sp.stR = stR
	childEnds = append(childEnds, stW)
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, childEnds, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	sp.cfgW = cfgW
	childEnds = append(childEnds, cfgR)
	var fdSock *os.File
	if o.fdSock {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, childEnds, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		fdSock, sp.fdSockParent = os.NewFile(uintptr(pair[1]), "fdsock"), pair[0]
		childEnds = append(childEnds, fdSock)
	}
	// The init is executed through a descriptor: the sandbox's user
	// (SandboxUID, for root) need not be able to traverse the binary's
	// directories (go test builds in 0700 directories).
	selfF, err := os.Open(binary)
	if err != nil {
		return nil, childEnds, fmt.Errorf("%w: open the sandbox init binary: %w", sandbox.ErrSetup, err)
	}
	childEnds = append(childEnds, selfF)
	return []*os.File{cfgR, stW, fdSock, selfF, o.proxy}, childEnds, nil
}

// initCmd is the command that starts the Go init with extra (open) as
// its descriptors from 3 on. With stage1 the small init binary is
// started without namespaces (a cheap vfork of this large process) and
// clones the namespaced init from its own small address space
// (nsinit.Stage1Main).
func (r *Runtime) initCmd(o initIO, extra []*os.File, stage1 bool) *exec.Cmd {
	hostUID, hostGID := r.hostIDs()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/6",
		Args:       []string{nsinit.Arg0},
		Env:        []string{"GOMAXPROCS=1"},
		Stdout:     o.stdout,
		Stderr:     o.stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  sandboxNamespaces,
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
	}
	if o.stdin != nil {
		cmd.Stdin = o.stdin
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

// cgJoin is how a Go init enters its cgroup.
type cgJoin int

const (
	// joinNone: the run has no cgroup.
	joinNone cgJoin = iota
	// joinClone: born in it, by clone3 with CLONE_INTO_CGROUP (v2).
	joinClone
	// joinThread: born in it, cloned by a thread visiting it (v1).
	joinThread
	// joinAfter: moved into it after the start (cgroup.procs), which
	// costs an RCU grace period.
	joinAfter
)

// firstJoin is the way to try first for cg.
func (r *Runtime) firstJoin(cg *cgroup) cgJoin {
	switch {
	case cg == nil:
		return joinNone
	case cg.v2:
		return joinClone
	case r.cgl.v1Threads:
		return joinThread
	}
	return joinAfter
}

// startInit starts sp's init from an OS thread of its own, which stays
// until the run ends (the parent-death signal follows the thread), and
// returns how it joined its cgroup. The init is born in its cgroup where
// the host allows (no migration, and it starts inside its limits); when
// that fails it is started again and moved in afterwards (joinAfter:
// the caller moves it). The init is cloned by vfork (vfork_linux.go),
// stage 1 and the fallback by os/exec.
func (r *Runtime) startInit(sp *sandboxProc, newCmd func(stage1 bool) *exec.Cmd, tr *nsinit.Tracer) (cgJoin, error) {
	cg := sp.cg
	for join := r.firstJoin(cg); ; join = joinAfter {
		// A move after the start would miss the init that stage 1 clones.
		stage1 := join != joinAfter && r.useStage1(cg)
		cmd := newCmd(stage1)
		var proc initProcess = execProcess{cmd}
		var vp *vforkProcess
		if !stage1 && vforkSupported && !r.noVfork {
			vp = &vforkProcess{cmd: cmd}
			proc = vp
		}
		start := func() error {
			err := proc.Start()
			if err != nil && vp != nil {
				r.opts.Logger.Debug("sandbox: vfork start failed, starting the init with os/exec", "err", err)
				proc = execProcess{cmd}
				err = proc.Start()
			}
			return err
		}
		reusable := func() bool { return vp == nil || vp.Reusable() }
		var err error
		switch join {
		case joinThread:
			var entered bool
			if entered, err = cg.startInside(r.cgl, start, reusable, sp.ended); !entered {
				r.opts.Logger.Debug("sandbox cgroup: cannot clone from inside, joining after the start", "err", err)
				continue
			}
		case joinClone:
			fd, ferr := unix.Open(cg.dirs[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if ferr != nil {
				continue
			}
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			_, err = startOnThread(nil, nil, nil, start, reusable, sp.ended)
			unix.Close(fd)
			if err != nil {
				// A kernel without clone3's cgroup field (ENOSYS, E2BIG),
				// or a cgroup the clone may not enter directly
				// (delegation rules): join after the start instead.
				continue
			}
		default:
			err = r.startThenJoin(cg, join, start, reusable, sp.ended, tr)
		}
		tr.Mark("clone, id maps, exec (cmd.Start)")
		if err != nil {
			return join, r.launchError(err)
		}
		sp.proc, sp.mode = proc, modeExec
		if stage1 {
			sp.mode = modeStage1
		} else if _, ok := proc.(*vforkProcess); ok {
			sp.mode = modeVfork
		}
		return join, nil
	}
}

// startThenJoin starts an init that is not born in its cgroup
// (joinNone, joinAfter). For joinAfter this process's own cgroup lock is
// primed meanwhile (cgroup.prime), so that the move after the start is
// quicker.
func (r *Runtime) startThenJoin(cg *cgroup, join cgJoin, start func() error, reusable func() bool, ended <-chan struct{}, tr *nsinit.Tracer) error {
	var primed chan struct{}
	if join == joinAfter {
		primed = make(chan struct{})
		go func() {
			defer close(primed)
			cg.prime(r.cgl)
		}()
	}
	_, err := startOnThread(nil, nil, nil, start, reusable, ended)
	if primed != nil {
		<-primed
		tr.Mark("cgroup lock primed")
	}
	return err
}

// launchError is the error of an init that could not be started: the
// host's user namespaces when the clone was refused.
func (r *Runtime) launchError(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
		f := r.facility("userns")
		f.Available = false
		f.Detail = "creating the namespaces failed: " + err.Error()
		f.Fix = userNSFix
		return &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
	}
	return fmt.Errorf("%w: start the sandbox init %s: %w", sandbox.ErrSetup, r.opts.Init, err)
}

// supervise runs a started Go init to its end: the watchdog (the wall
// limit and cancellation kill PID 1, which takes the whole PID namespace
// with it), the idmapped trees, the gate, the release, the status (early
// gets the result as soon as it is in), the reaping; and turns the
// status into the result.
func (r *Runtime) supervise(ctx context.Context, req *request, cfg *nsinit.Config, sp *sandboxProc, res sandbox.Result, o initIO) (sandbox.Result, error) {
	tr := req.tr
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timedOut, done := watchdog(runCtx, req.spec.Limits.Wall, sp.start, sp.kill)
	sp.watchdogDone = done
	if cfg.LowerFD {
		if err := sendIdmappedTrees(sp.fdSockParent, sp.proc.Pid(), sp.mode == modeStage1, cfg.Workspace, filepath.Dir(cfg.Upper), cfg.Mounts); err != nil {
			sp.abort()
			return res, fmt.Errorf("%w: idmapped workspace: %w", sandbox.ErrSetup, sp.stage1Reason(err))
		}
		tr.Mark("idmapped trees sent")
	}
	if req.gate != nil {
		if err := req.gate(); err != nil {
			sp.abort()
			return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		tr.Mark("gate passed (e.g. exec.start recorded)")
	}
	if err := sp.configWritten(); err != nil {
		sp.kill()
	} else if _, err := sp.cfgW.Write([]byte{nsinit.Release}); err != nil {
		sp.kill()
	}
	sp.cfgW.Close()
	sp.cfgW = nil
	tr.Mark("init released")
	// One frame: the init writes it once everything but itself is gone,
	// so the parent need not wait for the pipe's end (the init's whole
	// exit) to read it; Wait below waits for that.
	body, stErr := nsinit.ReadFrame(bufio.NewReaderSize(sp.stR, 512))
	tr.Mark("status read")
	end := initEnd{haveCg: sp.cg != nil, stage1: sp.mode == modeStage1}
	// The cgroup's counters are final once the init has reported (it
	// killed and reaped everything first): read them while it exits.
	if stErr == nil {
		end.oomKills, end.pidsMax = sp.events()
		if req.early != nil {
			r.reportEarly(req.early, sp.proc, body, &res, sp.start, timedOut, end.haveCg, end.oomKills, end.pidsMax, o.stdout, o.stderr)
		}
	}
	end.waitErr = sp.proc.Wait()
	if stErr != nil {
		end.oomKills, end.pidsMax = sp.events()
	}
	sp.stopWatchdog()
	tr.Mark("init reaped (pid/net ns gone)")
	res.Duration = time.Since(sp.start)
	res.Stdout, res.Stderr = o.stdout.bytes(), o.stderr.bytes()
	if stErr == nil {
		end.st, stErr = nsinit.DecodeStatus(body)
	}
	end.gotStatus = stErr == nil
	*req.st = end.st
	select {
	case <-timedOut:
		end.timedOut = true
	default:
	}
	end.outputCut = o.stdout.cut() || o.stderr.cut()
	return r.initResult(ctx, res, end)
}

// events reads the cgroup's OOM kills and refused forks (none without a
// cgroup).
func (sp *sandboxProc) events() (oomKills, pidsMax int) {
	if sp.cg == nil {
		return 0, 0
	}
	return sp.cg.events()
}

// stage1Reason returns why stage 1 failed, when it reported it (no user
// namespace), else err. The init must have been reaped.
func (sp *sandboxProc) stage1Reason(err error) error {
	if sp.mode != modeStage1 {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(sp.stR, nsinit.MaxMessage+4))
	if body, e := nsinit.ReadFrame(bufio.NewReader(bytes.NewReader(b))); e == nil {
		if st, e := nsinit.DecodeStatus(body); e == nil && st.Error != "" {
			return fmt.Errorf("%s: %s", st.Stage, st.Error)
		}
	}
	return err
}

// initEnd is how a Go init's run ended, as supervise saw it.
type initEnd struct {
	st        nsinit.Status
	gotStatus bool
	waitErr   error
	timedOut  bool
	haveCg    bool
	stage1    bool
	oomKills  int
	pidsMax   int
	outputCut bool
}

// initResult turns how a Go init's run ended into its result, or into
// the error of a sandbox that could not be set up.
func (r *Runtime) initResult(ctx context.Context, res sandbox.Result, e initEnd) (sandbox.Result, error) {
	if e.timedOut {
		markTimedOut(&res)
	}
	if res.Killed == "" && !e.gotStatus {
		if err := unreported(ctx, &res, e.haveCg, e.oomKills); err != nil {
			if errors.Is(err, errNoReport) {
				err = fmt.Errorf("%w: the sandbox init %s ended without a report (%v; from another build of fluffy?); stderr: %s", sandbox.ErrSetup, r.opts.Init, e.waitErr, bytes.TrimSpace(res.Stderr))
			}
			return res, err
		}
	}
	st := e.st
	if e.gotStatus && st.Error != "" {
		switch {
		case e.stage1 && st.Stage == nsinit.Stage1Stage:
			f := r.facility("userns")
			f.Available = false
			f.Detail = st.Error
			f.Fix = userNSFix
			return res, &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		case st.Stage == "overlay":
			f := r.facility("overlay-userns")
			f.Available = false
			f.Detail = "mounting the workspace overlay failed: " + st.Error
			f.Fix = overlayFix
			return res, &sandbox.UnavailableError{Missing: []sandbox.Facility{f}}
		case st.Stage == "command" || st.Stage == "chdir":
			return res, specError(st)
		}
		return res, fmt.Errorf("%w: %s: %s", sandbox.ErrSetup, st.Stage, st.Error)
	}
	applyStatus(&res, st, e.gotStatus, e.haveCg, e.oomKills, e.pidsMax, e.outputCut)
	return res, nil
}
