//go:build amd64 || arm64

package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The init is started with vfork semantics (CLONE_VM|CLONE_VFORK) even
// though it gets a new user namespace. os/exec cannot: with
// CLONE_NEWUSER, Go's child waits for this process to write its id maps
// and so cannot share this process's memory while it does; Go copies the
// whole address space instead (a full fork: every page table of this
// process copied, its pages write-protected, the copy torn down again at
// the init's exec, copy-on-write faults here afterwards: 1–2 ms of CPU
// for a small caller, about 10 ms for the full fluffy binary or for a
// process with 64 MB of heap; docs/benchmarks.md, Round 5). Here the child writes its own id maps, which the kernel allows
// for the one id its creator runs as. Root's sandboxes map uid 0 to
// nobody, not to root, so for the moment of the clone the creating
// thread (and only it: credentials are per thread for the kernel) takes
// nobody as its effective uid and gid and drops its supplementary
// groups; the new user namespace is then nobody's and the child maps
// nobody. The thread takes root back right after.

// Go's hooks around a fork (runtime, pushed to package syscall).
//
//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// The runtime's marks around a blocking system call (what syscall.Syscall
// does around RawSyscall).
//
//go:linkname runtimeEntersyscall runtime.entersyscall
func runtimeEntersyscall()

//go:linkname runtimeExitsyscall runtime.exitsyscall
func runtimeExitsyscall()

// rawVfork makes a clone system call that resumes this thread only once
// the child has executed or exited (vforkclone_linux_*.s).
func rawVfork(trap, a1, a2, a3 uintptr) (r1 uintptr, err syscall.Errno)

// vforkSupported says whether this build starts the init by vfork.
const vforkSupported = true

// cloneArgs is struct clone_args (clone3).
type cloneArgs struct {
	flags      uint64
	pidFD      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// vforkArgs is everything the child uses, prepared before the clone: the
// child shares this process's memory and may not allocate.
type vforkArgs struct {
	trap, a1, a2, a3 uintptr
	clone3           cloneArgs
	pidfd            int32

	path       *byte
	argv, envv []*byte
	fds        []int // fds[i] becomes the child's descriptor i; -1 closes it
	pipe       int   // write end (close-on-exec) for the child's errno
	nextfd     int

	uidMapPath, setgroupsPath, gidMapPath *byte
	uidMap, deny, gidMap                  []byte
	setsid                                bool
	pdeathsig                             uintptr
	nofile                                unix.Rlimit
	setNofile                             bool
	// prog, when set, replaces the exec: the child runs it (it ends
	// with an exec of its own).
	prog *childProg
	// step is the child's progress before the exec or prog (a vforkStep),
	// written by the child in this shared memory: which one failed.
	step uintptr
}

// vforkStep names the steps of vforkExec's child before its exec or prog.
type vforkStep uintptr

const (
	stepUIDMap vforkStep = iota
	stepSetgroups
	stepGIDMap
	stepIDs
	stepSetsid
	stepPdeathsig
	stepDescriptors
	stepExec
)

func (s vforkStep) String() string {
	switch s {
	case stepUIDMap:
		return "write its /proc/self/uid_map"
	case stepSetgroups:
		return "write its /proc/self/setgroups"
	case stepGIDMap:
		return "write its /proc/self/gid_map"
	case stepIDs:
		return "take uid and gid 0 in its user namespace"
	case stepSetsid:
		return "setsid"
	case stepPdeathsig:
		return "set its parent-death signal"
	case stepDescriptors:
		return "arrange its descriptors"
	}
	return "execve"
}

// vforkProcess starts the process an exec.Cmd describes (Path, Args, Env,
// Stdin, Stdout, Stderr, ExtraFiles and of SysProcAttr Cloneflags, the
// single-id Uid/GidMappings, Setsid, Pdeathsig, UseCgroupFD) by vfork.
// Start must run on a locked OS thread that stays alive while the process
// runs (Pdeathsig follows the thread); Reusable says afterwards whether
// the thread may go back to the Go scheduler.
type vforkProcess struct {
	cmd *exec.Cmd

	pid, pidfd int
	tainted    bool
	closeAfter []*os.File
	copies     []func() error
	wg         sync.WaitGroup
	copyErr    []error
	waited     bool
	waitErr    error
	mu         sync.Mutex // guards reaped
	reaped     bool
	// args keeps the child's arguments on the heap (see Start).
	args *vforkArgs
	// prog, when set, is what the child runs instead of cmd's exec.
	prog *childProg
	// handoff, when set, may give ForkLock up while the clone still
	// waits (a program that handsOff).
	handoff *forkHandoff
	// status is the wait status Wait collected.
	status unix.WaitStatus
}

func (p *vforkProcess) Pid() int { return p.pid }

// Reusable reports whether the thread that ran Start has its own
// credentials back.
func (p *vforkProcess) Reusable() bool { return !p.tainted }

// Signal signals the process through its pidfd (never a reused pid);
// after Wait it does nothing (the pidfd is closed, its number may be
// another file's).
func (p *vforkProcess) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
}

// Start clones and executes the process.
func (p *vforkProcess) Start() (err error) {
	c := p.cmd
	sys := c.SysProcAttr
	if sys == nil || len(sys.UidMappings) != 1 || len(sys.GidMappings) != 1 || sys.UidMappings[0].Size != 1 || sys.GidMappings[0].Size != 1 {
		return errors.New("vfork start: needs one uid and one gid mapping")
	}
	hostUID, hostGID := sys.UidMappings[0].HostID, sys.GidMappings[0].HostID
	juggle := os.Geteuid() != hostUID || os.Getegid() != hostGID
	if juggle && os.Geteuid() != 0 {
		return fmt.Errorf("vfork start: cannot map uid %d as uid %d", hostUID, os.Geteuid())
	}
	// The parent's ends of the pipes, closed here if the start fails
	// (otherwise by the copies).
	var parentEnds []*os.File
	defer func() {
		if err != nil {
			for _, f := range append(p.closeAfter, parentEnds...) {
				f.Close()
			}
			p.closeAfter, p.copies = nil, nil
		}
	}()
	// Standard streams, as os/exec sets them up.
	child := make([]*os.File, 3, 3+len(c.ExtraFiles))
	if c.Stdin == nil {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: os.DevNull, Err: err}
		}
		f := os.NewFile(uintptr(fd), os.DevNull)
		child[0] = f
		p.closeAfter = append(p.closeAfter, f)
	} else {
		pr, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		child[0] = pr
		p.closeAfter = append(p.closeAfter, pr)
		parentEnds = append(parentEnds, pw)
		in := c.Stdin
		p.copies = append(p.copies, func() error {
			_, err := io.Copy(pw, in)
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
				err = nil
			}
			if err1 := pw.Close(); err == nil {
				err = err1
			}
			return err
		})
	}
	for i, w := range []io.Writer{c.Stdout, c.Stderr} {
		if i == 1 && interfaceEqual(c.Stderr, c.Stdout) {
			// One pipe for both, as os/exec does.
			child[2] = child[1]
			break
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		child[1+i] = pw
		p.closeAfter = append(p.closeAfter, pw)
		parentEnds = append(parentEnds, pr)
		p.copies = append(p.copies, func() error {
			_, err := io.Copy(w, pr)
			pr.Close()
			return err
		})
	}
	child = append(child, c.ExtraFiles...)

	a := &vforkArgs{setsid: sys.Setsid, pdeathsig: uintptr(sys.Pdeathsig), prog: p.prog}
	// On the heap, never on this goroutine's stack: the clone gets the
	// addresses of a.pidfd and a.clone3 as plain integers, which a stack
	// growth before the clone (a deeper call, bigger race-instrumented
	// frames) would leave pointing at the old stack: the kernel then
	// wrote the pidfd there and p.pidfd read 0 (-race runs hung in Wait
	// after a kill that went to descriptor 0).
	p.args = a
	if a.path, err = syscall.BytePtrFromString(c.Path); err != nil {
		return err
	}
	if a.argv, err = syscall.SlicePtrFromStrings(c.Args); err != nil {
		return err
	}
	if a.envv, err = syscall.SlicePtrFromStrings(c.Env); err != nil {
		return err
	}
	a.uidMapPath, _ = syscall.BytePtrFromString("/proc/self/uid_map")
	a.setgroupsPath, _ = syscall.BytePtrFromString("/proc/self/setgroups")
	a.gidMapPath, _ = syscall.BytePtrFromString("/proc/self/gid_map")
	a.uidMap = []byte("0 " + strconv.Itoa(hostUID) + " 1\n")
	a.gidMap = []byte("0 " + strconv.Itoa(hostGID) + " 1\n")
	a.deny = []byte("deny")
	a.nofile, a.setNofile = originalNofile()
	a.fds = make([]int, len(child))
	for i, f := range child {
		a.fds[i] = -1
		if f != nil {
			a.fds[i] = int(f.Fd())
		}
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(pipe[0])
	a.pipe = pipe[1]
	a.nextfd = len(a.fds)
	for _, fd := range a.fds {
		a.nextfd = max(a.nextfd, fd+1)
	}
	flags := uintptr(sys.Cloneflags) | unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD
	if sys.UseCgroupFD {
		a.clone3 = cloneArgs{flags: uint64(flags) | unix.CLONE_INTO_CGROUP, pidFD: uint64(uintptr(unsafe.Pointer(&a.pidfd))), exitSignal: uint64(syscall.SIGCHLD), cgroup: uint64(sys.CgroupFD)}
		a.trap, a.a1, a.a2 = unix.SYS_CLONE3, uintptr(unsafe.Pointer(&a.clone3)), unsafe.Sizeof(a.clone3)
	} else {
		a.trap, a.a1, a.a3 = unix.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), uintptr(unsafe.Pointer(&a.pidfd))
	}

	runtime.LockOSThread()
	// ForkLock from before the change of ids to after their restoration:
	// the dumpable flag belongs to the whole process, and any thread's
	// change of effective uid resets it, so another start's juggle (or
	// its PID 1's undump) between this one's restoration of the flag and
	// its clone would leave the child's /proc/self/uid_map owned by host
	// root, and its write EACCES (TestConcurrentStarts).
	syscall.ForkLock.Lock()
	var groups []int
	dumpable := 1
	if juggle {
		// This thread only (raw system calls: Go's Setresuid and
		// friends change every thread). A change of effective uid also
		// makes the process not dumpable, which would leave the child's
		// /proc/self/uid_map owned by host root: the flag is restored.
		if groups, err = unix.Getgroups(); err != nil {
			syscall.ForkLock.Unlock()
			runtime.UnlockOSThread()
			return err
		}
		if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err == nil {
			dumpable = d
		}
		if err := threadCreds(-1, hostUID, -1, -1, hostGID, -1, []int{}); err != nil {
			p.restoreCreds(groups, dumpable)
			syscall.ForkLock.Unlock()
			return err
		}
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
			p.restoreCreds(groups, dumpable)
			syscall.ForkLock.Unlock()
			return err
		}
	}
	// PID 1's undump (prog.undumps) clears the flag in this process too
	// (they share the memory): it is put back.
	dumpableNow := -1
	if a.prog != nil && a.prog.undumps {
		if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err == nil {
			dumpableNow = d
		}
	}
	pid, errno := vforkBlocking(a)
	if p.handoff != nil && p.handoff.reclaim() {
		// Given up meanwhile: the restorations below change the
		// dumpable flag.
		syscall.ForkLock.Lock()
	}
	if dumpableNow >= 0 {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(dumpableNow), 0, 0, 0)
	}
	unix.Close(pipe[1])
	if juggle {
		p.restoreCreds(groups, dumpable)
	} else {
		runtime.UnlockOSThread()
	}
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(a)
	if errno != 0 {
		return &os.SyscallError{Syscall: "clone", Err: errno}
	}
	p.pid, p.pidfd = int(pid), int(a.pidfd)
	// The child's errno, if it failed before its exec; with a program,
	// also which of its ops failed (runProg).
	var rec [2]uintptr
	n, rerr := unix.Read(pipe[0], (*[16]byte)(unsafe.Pointer(&rec))[:])
	if rerr != nil || n != 0 {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(p.pid, &ws, 0, nil)
		unix.Close(p.pidfd)
		if rerr == nil && n == 16 && a.prog != nil {
			return a.prog.errorAt(int(rec[1])-1, syscall.Errno(rec[0]))
		}
		if rerr != nil {
			return fmt.Errorf("read the status of the new process: %w", rerr)
		}
		if st := vforkStep(a.step); st != stepExec || a.prog != nil {
			return fmt.Errorf("the new process could not %s: %w", st, syscall.Errno(rec[0]))
		}
		return &os.SyscallError{Syscall: "fork/exec " + c.Path, Err: syscall.Errno(rec[0])}
	}
	for _, f := range p.closeAfter {
		f.Close()
	}
	p.closeAfter = nil
	p.copyErr = make([]error, len(p.copies))
	for i, fn := range p.copies {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.copyErr[i] = fn()
		}()
	}
	return nil
}

// forkHandoff passes ForkLock, taken by a start before its clone, to the
// goroutine that learns the child's id maps are written (directGate),
// which gives it up then; the start takes it again once its clone has
// returned (direct_linux.go explains why this is safe). Whichever comes
// second sees what the first did: a clone that returns first (its child
// died) keeps the lock.
type forkHandoff struct {
	mu                 sync.Mutex
	released, returned bool
}

// release gives ForkLock up for the start still in its clone.
func (h *forkHandoff) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.returned && !h.released {
		h.released = true
		syscall.ForkLock.Unlock()
	}
}

// reclaim marks the clone returned and reports whether ForkLock was
// given up meanwhile (the start must take it again).
func (h *forkHandoff) reclaim() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.returned = true
	return h.released
}

// restoreCreds gives this thread root's ids and groups back; if it
// cannot, the thread stays locked (tainted) and is never reused.
func (p *vforkProcess) restoreCreds(groups []int, dumpable int) {
	if threadCreds(-1, 0, -1, -1, 0, -1, groups) != nil {
		p.tainted = true
		return
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(dumpable), 0, 0, 0)
	runtime.UnlockOSThread()
}

// threadCreds sets the calling thread's uids, gids (-1 keeps one) and
// supplementary groups: uids last when dropping root, first when taking
// it back, so each step is allowed.
func threadCreds(ruid, euid, suid, rgid, egid, sgid int, groups []int) error {
	setUID := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(ruid), uintptr(euid), uintptr(suid)); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
		return nil
	}
	if euid == 0 {
		if err := setUID(); err != nil {
			return err
		}
	}
	var gp uintptr
	if len(groups) > 0 {
		g := make([]uint32, len(groups))
		for i, v := range groups {
			g[i] = uint32(v)
		}
		gp = uintptr(unsafe.Pointer(&g[0]))
		defer runtime.KeepAlive(g)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), gp, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(rgid), uintptr(egid), uintptr(sgid)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if euid != 0 {
		return setUID()
	}
	return nil
}

// Wait waits for the process to exit and for its output to be copied.
// drained waits until the child's output has been copied to its end
// (every writer closed), which can come before the child's exit.
func (p *vforkProcess) drained() { p.wg.Wait() }

func (p *vforkProcess) Wait() error {
	if p.waited {
		return p.waitErr
	}
	p.waited = true
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(p.pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.waitErr = err
		}
		break
	}
	p.status = ws
	p.mu.Lock()
	p.reaped = true
	unix.Close(p.pidfd)
	p.mu.Unlock()
	p.wg.Wait()
	if p.waitErr == nil {
		switch {
		case ws.Signaled():
			p.waitErr = fmt.Errorf("signal: %v", ws.Signal())
		case ws.ExitStatus() != 0:
			p.waitErr = fmt.Errorf("exit status %d", ws.ExitStatus())
		}
	}
	if p.waitErr == nil {
		p.waitErr = errors.Join(p.copyErr...)
	}
	return p.waitErr
}

// vforkBlocking runs vforkExec as a blocking system call: this thread's
// P goes back to the scheduler while the child runs, as it would in a
// read, instead of staying held as in Go's own vfork (a raw system call,
// fine for a child that executes at once). The child here may run for
// milliseconds (the direct start builds the whole sandbox) and may wait
// for this process (the gate, direct_linux.go): with the P held, a
// stop-the-world requested meanwhile would stop every other goroutine,
// the one that releases the child included, and wait for this P
// forever.
//
// The goroutine's stack is safe to share with the child: from
// entersyscall on, the runtime neither moves nor shrinks it and the
// garbage collector reads it only from this frame up, while the child
// runs in vforkExec's frame and below. Signals stay blocked on this
// thread from runtimeBeforeFork to runtimeAfterFork, so no handler runs
// on the shared stack, and both are called inside the system call so
// that the thread holds no runtime lock count when it takes a P back.
//
//go:norace
//go:nosplit
func vforkBlocking(a *vforkArgs) (pid uintptr, err1 syscall.Errno) {
	runtimeEntersyscall()
	runtimeBeforeFork()
	pid, err1 = vforkExec(a)
	runtimeAfterFork()
	runtimeExitsyscall()
	return
}

// vforkExec clones the child and, in it, writes its id maps, becomes
// uid and gid 0 of its namespace, starts a session, sets the parent-death
// signal, arranges its descriptors and executes the program. It returns
// in the parent only, once the child has executed or exited; the parent
// must return at once (its frame is the one the child ran on) and call
// runtimeAfterFork.
//
//go:norace
//go:nosplit
func vforkExec(a *vforkArgs) (pid uintptr, err1 syscall.Errno) {
	var (
		fd     uintptr
		i      int
		pipe   int
		nextfd int
	)
	pid, err1 = rawVfork(a.trap, a.a1, a.a2, a.a3)
	if err1 != 0 || pid != 0 {
		return
	}
	// In the child, on the parent's stack: raw system calls only.
	pipe = a.pipe
	a.step = uintptr(stepUIDMap)
	if fd, _, err1 = syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(a.uidMapPath)), uintptr(syscall.O_WRONLY), 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.uidMap[0])), uintptr(len(a.uidMap))); err1 != 0 {
		goto childerror
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	a.step = uintptr(stepSetgroups)
	if fd, _, err1 = syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(a.setgroupsPath)), uintptr(syscall.O_WRONLY), 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.deny[0])), uintptr(len(a.deny))); err1 != 0 {
		goto childerror
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	a.step = uintptr(stepGIDMap)
	if fd, _, err1 = syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(a.gidMapPath)), uintptr(syscall.O_WRONLY), 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.gidMap[0])), uintptr(len(a.gidMap))); err1 != 0 {
		goto childerror
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	// uid and gid 0 inside, for the real and saved ids too.
	a.step = uintptr(stepIDs)
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETRESGID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETRESUID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	a.step = uintptr(stepSetsid)
	if a.setsid {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	runtimeAfterForkInChild()
	a.step = uintptr(stepPdeathsig)
	if a.pdeathsig != 0 {
		if _, _, err1 = syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, a.pdeathsig, 0, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	// Descriptors, as syscall.forkAndExecInChild1 arranges them: first
	// move those that a lower slot would overwrite out of the way, then
	// put each in its slot (without close-on-exec).
	a.step = uintptr(stepDescriptors)
	nextfd = a.nextfd
	if pipe < nextfd {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(pipe), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
			goto childerror
		}
		pipe = nextfd
		nextfd++
	}
	for i = 0; i < len(a.fds); i++ {
		if a.fds[i] >= 0 && a.fds[i] < i {
			if nextfd == pipe {
				nextfd++
			}
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(a.fds[i]), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
				goto childerror
			}
			a.fds[i] = nextfd
			nextfd++
		}
	}
	for i = 0; i < len(a.fds); i++ {
		if a.fds[i] == -1 {
			syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(i), 0, 0)
			continue
		}
		if a.fds[i] == i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(i), syscall.F_SETFD, 0); err1 != 0 {
				goto childerror
			}
			continue
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(a.fds[i]), uintptr(i), 0); err1 != 0 {
			goto childerror
		}
	}
	if a.setNofile {
		// As os/exec does: the limit this process started with.
		syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, syscall.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&a.nofile)), 0, 0, 0)
	}
	if a.prog != nil {
		// A program's child lives long before its exec (a direct start's
		// PID 1 builds the root and waits for its gate): it keeps none of
		// this process's other descriptors, which it inherited with
		// close-on-exec. It would hold the write ends of other starts'
		// pipes open (their status, the command's output), and they would
		// wait for its exec. Its own are 0..len(fds)-1 and the status pipe,
		// moved just above them.
		if pipe != len(a.fds) {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(pipe), uintptr(len(a.fds)), syscall.O_CLOEXEC); err1 != 0 {
				goto childerror
			}
			pipe = len(a.fds)
		}
		// Linux 5.9; a program that hands ForkLock off (5.13 and landlock)
		// needs it, the others do their best.
		if _, _, err1 = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(pipe+1), uintptr(^uint32(0)), 0); err1 != 0 && a.prog.handsOff {
			goto childerror
		}
		err1 = 0
		a.step = uintptr(stepExec)
		runProg(a.prog, pipe) // does not return
	}
	a.step = uintptr(stepExec)
	_, _, err1 = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(a.path)), uintptr(unsafe.Pointer(&a.argv[0])), uintptr(unsafe.Pointer(&a.envv[0])))

childerror:
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&err1)), unsafe.Sizeof(err1))
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 253, 0, 0)
	}
}

// originalNofile returns the soft RLIMIT_NOFILE this process most
// likely started with, for the init (and so the command) to get it as it
// would from os/exec. Go raises its own soft limit to the hard limit - 1
// at start and os/exec gives children the original back, a value the
// syscall package keeps to itself; here it is read from the parent
// process, from which this one inherited it. It reports false (leave the
// limit alone) when Go did not raise it, when it was changed since, or
// when the parent's limits do not fit (another hard limit, or not lower).
var originalNofile = sync.OnceValues(func() (unix.Rlimit, bool) {
	var cur unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &cur) != nil || cur.Max == 0 || cur.Cur != cur.Max-1 {
		return cur, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(os.Getppid()) + "/limits")
	if err != nil {
		return cur, false
	}
	soft, hard, ok := parseNofile(string(b))
	if !ok || hard != cur.Max || soft >= cur.Cur {
		return cur, false
	}
	return unix.Rlimit{Cur: soft, Max: cur.Max}, true
})

// parseNofile reads the "Max open files" line of a /proc/PID/limits.
func parseNofile(limits string) (soft, hard uint64, ok bool) {
	for _, line := range strings.Split(limits, "\n") {
		rest, found := strings.CutPrefix(line, "Max open files")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false
		}
		num := func(s string) (uint64, bool) {
			if s == "unlimited" {
				return unix.RLIM_INFINITY, true
			}
			n, err := strconv.ParseUint(s, 10, 64)
			return n, err == nil
		}
		soft, ok1 := num(f[0])
		hard, ok2 := num(f[1])
		return soft, hard, ok1 && ok2
	}
	return 0, 0, false
}

// interfaceEqual reports a == b without panicking on uncomparable
// dynamic types (os/exec's check for Stdout == Stderr).
func interfaceEqual(a, b any) bool {
	defer func() { _ = recover() }()
	return a == b
}

// atFDCWD is AT_FDCWD as a variable (a negative constant does not convert
// to uintptr).
var atFDCWD = unix.AT_FDCWD
