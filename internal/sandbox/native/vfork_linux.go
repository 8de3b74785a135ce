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
	"sync/atomic"
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
// process with 64 MB of heap; docs/benchmarks.md, the row "the caller's heap").
//
// A caller that maps its own ids (an ordinary user) has the child write
// its own id maps, which the kernel allows for the one id its creator
// runs as. Root's sandboxes map uid 0 to SandboxUID, not to root, and
// the new user namespace must stay root's: a namespace is owned by the
// effective uid of the thread that clones it, and its owner holds every
// capability in it, so a namespace owned by the sandbox's host uid would
// let any process of that uid setns into the sandbox's namespaces,
// ptrace its processes and read its files through /proc. The thread
// therefore clones as root, and another thread of this process writes
// the child's maps (only a writer privileged over the parent namespace
// may map an id other than its own): the child asks on a socket pair
// first thing and waits for the answer (writeChildMaps).

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
	// mapSync, when not -1, is the child's end of the socket pair on
	// which it asks this process to write its id maps (root callers);
	// mapErr is what writeChildMaps failed with, 0 when it did not;
	// mapByte is the child's buffer for the exchange.
	// mapPeer is this process's end, which the child inherits and closes
	// first: else, were this process killed while the child waits for
	// its maps, the child's own copy would keep the pair open, the wait
	// would never end (no parent-death signal is set yet), and the child
	// would hold every descriptor it inherited, the audit log's lock
	// among them, for good.
	mapSync int
	mapPeer int
	mapErr  syscall.Errno
	mapByte [1]byte
	// dumpable, when not -1, is this process's dumpable flag, which a
	// root caller's child sets back right after it becomes the
	// sandbox's uid (a change of effective uid clears the flag of the
	// memory it shares with this process).
	dumpable  int
	setsid    bool
	pdeathsig uintptr
	nofile    unix.Rlimit
	setNofile bool
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
	stepParentMaps
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
	case stepParentMaps:
		return "have its id maps written by its parent"
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
	// mapWriter, when set, stands in for writeChildMaps (a test plays a
	// parent that goes away without answering).
	mapWriter func(sync int, a *vforkArgs)
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
// streams sets up the child's standard streams as os/exec does (its
// ExtraFiles after them): the child's ends, which p.closeAfter closes
// once it runs, the copies between pipes and c's readers and writers
// (p.copies), and this process's ends of the pipes, returned even on
// error for the caller to close.
func (p *vforkProcess) streams(c *exec.Cmd) (child, parentEnds []*os.File, err error) {
	child = make([]*os.File, 3, 3+len(c.ExtraFiles))
	if c.Stdin == nil {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, parentEnds, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
		}
		f := os.NewFile(uintptr(fd), os.DevNull)
		child[0] = f
		p.closeAfter = append(p.closeAfter, f)
	} else {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, parentEnds, err
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
			return nil, parentEnds, err
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
	return child, parentEnds, nil
}

func (p *vforkProcess) Start() (err error) {
	c := p.cmd
	sys := c.SysProcAttr
	if sys == nil || len(sys.UidMappings) != 1 || len(sys.GidMappings) != 1 || sys.UidMappings[0].Size != 1 || sys.GidMappings[0].Size != 1 {
		return errors.New("vfork start: needs one uid and one gid mapping")
	}
	hostUID, hostGID := sys.UidMappings[0].HostID, sys.GidMappings[0].HostID
	parentMaps := os.Geteuid() != hostUID || os.Getegid() != hostGID
	if parentMaps && os.Geteuid() != 0 {
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
	child, ends, err := p.streams(c)
	parentEnds = ends
	if err != nil {
		return err
	}

	a, err := p.newArgs(child, hostUID, hostGID)
	if err != nil {
		return err
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(pipe[0])
	a.pipe = pipe[1]
	// The socket pair on which a root caller's child asks for its id
	// maps (writeChildMaps), made before ForkLock: close-on-exec, and
	// the child closes its end itself.
	var syncParent int
	if parentMaps {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("vfork start: socket pair for the id maps: %w", err)
		}
		a.mapSync, syncParent = pair[0], pair[1]
		a.mapPeer = syncParent
	}

	runtime.LockOSThread()
	// ForkLock from before the clone to after it: the dumpable flag
	// belongs to the whole process, and a change of effective uid
	// resets it: an ordinary caller's child writes its own
	// /proc/self/uid_map, which a flag cleared meanwhile by another
	// start (its PID 1's undump, or its child becoming the sandbox's
	// uid) would leave owned by host root, and its write EACCES
	// (TestConcurrentStarts).
	syscall.ForkLock.Lock()
	dumpable := -1
	if parentMaps || (a.prog != nil && a.prog.undumps) {
		// A root caller's child becoming the sandbox's uid, and PID 1's
		// undump (prog.undumps), clear the flag in this process too
		// (they share the memory): it is put back.
		if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err == nil {
			dumpable = d
		}
	}
	if parentMaps {
		a.dumpable = dumpable
		w := writeChildMaps
		if p.mapWriter != nil {
			w = p.mapWriter
		}
		go w(syncParent, a)
	}
	pid, errno := vforkBlocking(a)
	if parentMaps {
		// The writer sees the end of the exchange once the child has
		// closed its end too (at its exec or exit, or just after it).
		unix.Close(a.mapSync)
	}
	if p.handoff != nil && p.handoff.reclaim() {
		// Given up meanwhile: the restoration below changes the
		// dumpable flag.
		syscall.ForkLock.Lock()
	}
	if dumpable >= 0 {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(dumpable), 0, 0, 0)
	}
	unix.Close(pipe[1])
	runtime.UnlockOSThread()
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(a)
	if errno != 0 {
		return &os.SyscallError{Syscall: "clone", Err: errno}
	}
	p.pid, p.pidfd = int(pid), int(a.pidfd)
	if err := p.childFailure(a, pipe[0]); err != nil {
		return err
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

// newArgs prepares, before the clone, everything the child of Start
// needs but its error pipe (the child may not allocate); child are its
// descriptors from 0 on.
func (p *vforkProcess) newArgs(child []*os.File, hostUID, hostGID int) (a *vforkArgs, err error) {
	c := p.cmd
	sys := c.SysProcAttr
	a = &vforkArgs{setsid: sys.Setsid, pdeathsig: uintptr(sys.Pdeathsig), prog: p.prog, mapSync: -1, dumpable: -1}
	// On the heap, never on this goroutine's stack: the clone gets the
	// addresses of a.pidfd and a.clone3 as plain integers, which a stack
	// growth before the clone (a deeper call, bigger race-instrumented
	// frames) would leave pointing at the old stack: the kernel then
	// wrote the pidfd there and p.pidfd read 0 (-race runs hung in Wait
	// after a kill that went to descriptor 0).
	p.args = a
	if a.path, err = syscall.BytePtrFromString(c.Path); err != nil {
		return nil, err
	}
	if a.argv, err = syscall.SlicePtrFromStrings(c.Args); err != nil {
		return nil, err
	}
	if a.envv, err = syscall.SlicePtrFromStrings(c.Env); err != nil {
		return nil, err
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

	return a, nil
}

// childFailure reads the child's errno from the error pipe (nothing: it
// executed) and, when it failed before its exec, reaps it and returns
// why; with a program, also which of its ops failed (runProg).
func (p *vforkProcess) childFailure(a *vforkArgs, pipe int) error {
	var rec [2]uintptr
	n, rerr := unix.Read(pipe, (*[16]byte)(unsafe.Pointer(&rec))[:])
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
		return &os.SyscallError{Syscall: "fork/exec " + p.cmd.Path, Err: syscall.Errno(rec[0])}
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

// writeChildMaps writes the id maps of a root caller's child when it
// asks for them (one byte on sync) and answers with one byte: a.mapErr
// says whether it failed. It runs on a thread of its own while the
// cloning thread waits in the clone. The child's pid comes from its
// pidfd, which the kernel stores (in a.pidfd) before the child runs; it
// cannot be another process's: the child waits for the answer, and the
// pid of a child that died meanwhile stays its own until it is reaped.
func writeChildMaps(sync int, a *vforkArgs) {
	defer unix.Close(sync)
	var b [1]byte
	if n, err := readRetry(sync, b[:]); n != 1 || err != nil {
		return // the child died or executed before it asked
	}
	if err := writeMaps(int(atomic.LoadInt32(&a.pidfd)), a.uidMap, a.gidMap); err != nil {
		a.mapErr = syscall.EPERM
		if errno, ok := errors.AsType[syscall.Errno](err); ok {
			a.mapErr = errno
		}
	}
	_, _ = unix.Write(sync, b[:])
}

// writeMaps writes the uid and gid maps of the process that pidfd refers
// to.
func writeMaps(pidfd int, uidMap, gidMap []byte) error {
	info, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return fmt.Errorf("the new process's pid: %w", err)
	}
	pid := -1
	for line := range strings.Lines(string(info)) {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if pid <= 0 {
		return fmt.Errorf("the new process's pid: none in the fdinfo of its pidfd: %w", syscall.ESRCH)
	}
	for _, m := range []struct {
		file string
		data []byte
	}{{"uid_map", uidMap}, {"gid_map", gidMap}} {
		path := "/proc/" + strconv.Itoa(pid) + "/" + m.file
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		_, err = unix.Write(fd, m.data)
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
	}
	return nil
}

// readRetry is a read that goes on after EINTR.
func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
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
	var pipe int
	pid, err1 = rawVfork(a.trap, a.a1, a.a2, a.a3)
	if err1 != 0 || pid != 0 {
		return
	}
	// In the child, on the parent's stack: raw system calls only.
	pipe = a.pipe
	if err1 = childIDMaps(a); err1 != 0 {
		goto childerror
	}
	// uid and gid 0 inside, for the real and saved ids too.
	a.step = uintptr(stepIDs)
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETRESGID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETRESUID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if a.dumpable >= 0 {
		// At once, so that whoever takes ForkLock after this start has
		// given it up (forkHandoff) sees this process as it was.
		syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, uintptr(a.dumpable), 0, 0, 0, 0)
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
	// Descriptors, as syscall.forkAndExecInChild1 arranges them.
	a.step = uintptr(stepDescriptors)
	if pipe, err1 = childDescriptors(a, pipe); err1 != 0 {
		goto childerror
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

// childIDMaps makes the child uid and gid 0 of its new user namespace
// from the outside in: a root caller's child asks the parent to write
// its maps (writeChildMaps) and drops root's supplementary groups; any
// other caller's child writes its own maps. In the child of vforkExec,
// on the parent's stack: raw system calls only.
//
//go:norace
//go:nosplit
func childIDMaps(a *vforkArgs) (err1 syscall.Errno) {
	var n uintptr
	if a.mapSync >= 0 {
		// A root caller's child: the parent writes the maps
		// (writeChildMaps); the namespace stays root's.
		a.step = uintptr(stepParentMaps)
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(a.mapPeer), 0, 0)
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(a.mapSync), uintptr(unsafe.Pointer(&a.mapByte[0])), 1); err1 != 0 {
			return err1
		}
		for {
			n, _, err1 = syscall.RawSyscall(syscall.SYS_READ, uintptr(a.mapSync), uintptr(unsafe.Pointer(&a.mapByte[0])), 1)
			if err1 != syscall.EINTR {
				break
			}
		}
		if err1 == 0 && n != 1 {
			err1 = syscall.EPIPE
		}
		if err1 == 0 {
			err1 = a.mapErr
		}
		if err1 != 0 {
			return err1
		}
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(a.mapSync), 0, 0)
		// Root's supplementary groups go (a privileged writer's gid map
		// leaves setgroups allowed).
		a.step = uintptr(stepSetgroups)
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); err1 != 0 {
			return err1
		}
		return 0
	}
	a.step = uintptr(stepUIDMap)
	if err1 = childWriteFile(a.uidMapPath, a.uidMap); err1 != 0 {
		return err1
	}
	a.step = uintptr(stepSetgroups)
	if err1 = childWriteFile(a.setgroupsPath, a.deny); err1 != 0 {
		return err1
	}
	a.step = uintptr(stepGIDMap)
	if err1 = childWriteFile(a.gidMapPath, a.gidMap); err1 != 0 {
		return err1
	}
	return 0
}

// childWriteFile writes b to the file at path (a NUL-terminated name),
// as the child writes its own id maps. In the child of vforkExec: raw
// system calls only.
//
//go:nosplit
func childWriteFile(path *byte, b []byte) syscall.Errno {
	fd, _, err1 := syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)), uintptr(syscall.O_WRONLY), 0, 0, 0)
	if err1 != 0 {
		return err1
	}
	_, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	return err1
}

// childDescriptors arranges the child's descriptors as
// syscall.forkAndExecInChild1 does: first it moves those that a lower
// slot would overwrite out of the way (the error pipe too: it returns
// the pipe's number), then puts each in its slot (without close-on-exec). In
// the child of vforkExec: raw system calls only.
//
//go:norace
//go:nosplit
func childDescriptors(a *vforkArgs, pipe int) (newPipe int, err1 syscall.Errno) {
	var i int
	nextfd := a.nextfd
	if pipe < nextfd {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(pipe), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
			return pipe, err1
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
				return pipe, err1
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
				return pipe, err1
			}
			continue
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(a.fds[i]), uintptr(i), 0); err1 != 0 {
			return pipe, err1
		}
	}
	return pipe, 0
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
