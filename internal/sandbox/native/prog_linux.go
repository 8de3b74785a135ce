//go:build amd64 || arm64

package native

import (
	"fmt"
	"sort"
	"strings"
	"syscall"
	"unsafe"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"golang.org/x/sys/unix"
)

// A childProg is the work a vfork child does between its clone and its
// exec, prepared by the parent as a list of system calls: the child
// shares this process's memory and may not allocate, take locks or grow
// its stack, so every argument (paths, option strings, structures) is
// built here, and the child only runs the list (runProg). It makes the
// direct start possible: the sandbox's root, its restrictions and the
// command's exec done without a second Go runtime (direct_linux.go).
type childProg struct {
	ops []childOp
	// what describes each op for the error the parent reports (the
	// child only says which op failed, and its errno).
	what []opWhat
	// slots hold results that later ops use (descriptors, a pid).
	slots [16]uintptr
	// forkAt is the vfork op being run (see runProg).
	forkAt int
	// released is the byte an opWait reads.
	released byte
	// handsOff says the program's first op tells the parent, on
	// directGate, that its id maps are written (forkHandoff).
	handsOff bool
	// undumps says the program makes the memory it shares undumpable;
	// the parent sets the flag back (vforkProcess.Start).
	undumps bool
	// times, when not nil (a traced run), receives each op's end on
	// CLOCK_MONOTONIC (marks).
	times []int64
	// upperBase, when not nil, receives the statfs of a throw-away
	// change set's tmpfs once the overlay is mounted (the child writes
	// it; read after the run).
	upperBase *unix.Statfs_t
	// tail is an ahead start's placeholders (ahead_linux.go).
	tail aheadTail
	// keep holds what ops point to, alive until the child is done.
	keep []any
	// err is the first string that cannot be a C string (str).
	err error
}

// childOp is one system call. Its arguments are a[i] + p[i] (an integer
// or a pointer), then in/mem substitute earlier results.
type childOp struct {
	nr uintptr
	a  [6]uintptr
	p  [6]unsafe.Pointer
	// in > 0: argument inArg is slots[in].
	in, inArg int8
	// mem != nil: *mem = slots[memSlot] before the call (a descriptor
	// inside a structure).
	mem     *int32
	memSlot int8
	// out > 0: the call's result goes to slots[out].
	out int8
	// ok is an errno that counts as success (EEXIST for a mkdir).
	ok   syscall.Errno
	kind opKind
	// next is where the parent of a vfork op continues.
	next int32
}

type opKind uint8

const (
	opPlain opKind = iota
	// opOr: when it succeeds, the op after it (its fallback, run when
	// this one fails with ok... see or) is skipped.
	opOr
	// opTry: a failure moves on to the next op (exec candidates).
	opTry
	// opVfork: clone with vfork semantics; the child goes on with the
	// next op, the parent (once the child has executed) at next.
	opVfork
	// opWait: a read of one byte into released (waitRelease), which
	// must be releaseGo; anything else (another byte, end of file)
	// fails with ECANCELED.
	opWait
	// opSkip: not run (a placeholder an ahead start fills in, ahead.go).
	opSkip
	// opExecs: execve of each path in the NULL-terminated array p[0] in
	// turn, with argv p[1] and environment p[2]; it fails with the last
	// one's errno (nsinit.lookPath's search, done by execve).
	opExecs
)

// releaseGo lets a waiting child go on; releaseStop (or the writer's
// end closed) makes it fail.
const (
	releaseStop byte = 0
	releaseGo   byte = 1
)

// opWhat is an op's stage (nsinit's stage names: the error handling
// branches on them) and a description of what it did.
type opWhat struct {
	stage, what string
}

// opError is the failure of a child's op.
type opError struct {
	Stage, What string
	Errno       syscall.Errno
}

func (e *opError) Error() string {
	if e.Stage == "command" && e.Errno == syscall.ENOENT {
		return e.What // "x: command not found in the sandbox (PATH=...)"
	}
	return fmt.Sprintf("%s: %v", e.What, e.Errno)
}
func (e *opError) Unwrap() error { return e.Errno }

// errorAt describes the failure the child reported: op index i.
func (p *childProg) errorAt(i int, errno syscall.Errno) error {
	if i < 0 || i >= len(p.what) {
		return &opError{Stage: "start", What: fmt.Sprintf("op %d", i), Errno: errno}
	}
	return &opError{Stage: p.what[i].stage, What: p.what[i].what, Errno: errno}
}

// add appends an op and returns its index.
func (p *childProg) add(stage, what string, o childOp) int {
	p.ops = append(p.ops, o)
	p.what = append(p.what, opWhat{stage, what})
	return len(p.ops) - 1
}

// str returns a NUL-terminated copy of s that stays alive with p. A
// string with a NUL inside would be cut short: p.err says so.
func (p *childProg) str(s string) unsafe.Pointer {
	if strings.IndexByte(s, 0) >= 0 && p.err == nil {
		p.err = fmt.Errorf("%q: a NUL byte in a path, argument or variable", s)
	}
	b := append([]byte(s), 0)
	p.keep = append(p.keep, b)
	return unsafe.Pointer(&b[0])
}

// ptr keeps v alive with p and returns it.
func (p *childProg) ptr(v any, ptr unsafe.Pointer) unsafe.Pointer {
	p.keep = append(p.keep, v)
	return ptr
}

// envv is strv for an environment, its C strings in sc's memory when sc
// is set (a secret's value may be among them: sandbox.Spec.Scratch). An
// error names the variable, never its value.
func (p *childProg) envv(env []string, sc sandbox.Scratch) unsafe.Pointer {
	if sc == nil {
		return p.strv(env)
	}
	v := make([]unsafe.Pointer, len(env)+1)
	for i, s := range env {
		b := sc.Bytes(len(s) + 1)
		if b == nil {
			v[i] = p.str(s)
			continue
		}
		if strings.IndexByte(s, 0) >= 0 && p.err == nil {
			name, _, _ := strings.Cut(s, "=")
			p.err = fmt.Errorf("the variable %q holds a NUL byte", name)
		}
		copy(b, s)
		v[i] = unsafe.Pointer(&b[0])
	}
	return p.ptr(v, unsafe.Pointer(&v[0]))
}

// strv returns a NULL-terminated array of C strings.
func (p *childProg) strv(ss []string) unsafe.Pointer {
	v := make([]unsafe.Pointer, len(ss)+1)
	for i, s := range ss {
		v[i] = p.str(s)
	}
	return p.ptr(v, unsafe.Pointer(&v[0]))
}

func (p *childProg) mount(stage, what, src, dst, fstype string, flags uintptr, data string) int {
	o := childOp{nr: unix.SYS_MOUNT}
	if src != "" {
		o.p[0] = p.str(src)
	}
	o.p[1] = p.str(dst)
	if fstype != "" {
		o.p[2] = p.str(fstype)
	}
	o.a[3] = flags
	if data != "" {
		o.p[4] = p.str(data)
	}
	return p.add(stage, what, o)
}

func (p *childProg) mkdir(stage, path string, mode uint32, existOK bool) {
	o := childOp{nr: unix.SYS_MKDIRAT, a: [6]uintptr{uintptr(atFDCWD), 0, uintptr(mode)}}
	o.p[1] = p.str(path)
	if existOK {
		o.ok = unix.EEXIST
	}
	p.add(stage, "mkdir "+path, o)
}

// file creates an empty regular file (a mount point for a file).
func (p *childProg) file(stage, path string) {
	o := childOp{nr: unix.SYS_MKNODAT, a: [6]uintptr{uintptr(atFDCWD), 0, unix.S_IFREG | 0o644}, ok: unix.EEXIST}
	o.p[1] = p.str(path)
	p.add(stage, "mount point "+path, o)
}

func (p *childProg) symlink(stage, target, path string) {
	o := childOp{nr: unix.SYS_SYMLINKAT, a: [6]uintptr{0, uintptr(atFDCWD)}}
	o.p[0], o.p[2] = p.str(target), p.str(path)
	p.add(stage, "symlink "+path, o)
}

func (p *childProg) chdir(stage, what, path string) {
	o := childOp{nr: unix.SYS_CHDIR}
	o.p[0] = p.str(path)
	p.add(stage, what, o)
}

func (p *childProg) call(stage, what string, nr uintptr, args ...uintptr) int {
	o := childOp{nr: nr}
	copy(o.a[:], args)
	return p.add(stage, what, o)
}

func (p *childProg) closeFD(fd int) {
	p.call("start", fmt.Sprintf("close %d", fd), unix.SYS_CLOSE, uintptr(fd))
}

// mountSetattr sets attributes on the mount at path and below.
func (p *childProg) mountSetattr(stage, what, path string, set uint64) {
	attr := &unix.MountAttr{Attr_set: set}
	o := childOp{nr: unix.SYS_MOUNT_SETATTR, a: [6]uintptr{uintptr(atFDCWD), 0, unix.AT_RECURSIVE, 0, unsafe.Sizeof(*attr)}}
	o.p[1] = p.str(path)
	o.p[3] = p.ptr(attr, unsafe.Pointer(attr))
	// mount_setattr's dirfd is -1 in nsinit's bindMount; AT_FDCWD is
	// the same for an absolute path.
	p.add(stage, what, o)
}

// waitRelease waits until the byte read from fd is releaseGo.
func (p *childProg) waitRelease(stage, what string, fd int) {
	o := childOp{nr: unix.SYS_READ, a: [6]uintptr{uintptr(fd), 0, 1}, kind: opWait}
	o.p[1] = unsafe.Pointer(&p.released)
	p.add(stage, what, o)
}

// sendFD sends the descriptor in slot over the socket sock (SCM_RIGHTS).
func (p *childProg) sendFD(stage, what string, sock int, slot int8) {
	oob := unix.UnixRights(0)
	hdr := unix.SizeofCmsghdr
	data := (*int32)(unsafe.Pointer(&oob[hdr]))
	buf := []byte{0}
	iov := &unix.Iovec{Base: &buf[0]}
	iov.SetLen(1)
	msg := &unix.Msghdr{Iov: iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(len(oob))
	p.keep = append(p.keep, oob, buf, iov)
	o := childOp{nr: unix.SYS_SENDMSG, a: [6]uintptr{uintptr(sock), 0, unix.MSG_NOSIGNAL}, mem: data, memSlot: slot}
	o.p[1] = p.ptr(msg, unsafe.Pointer(msg))
	p.add(stage, what, o)
}

// marks turns times into a trace (writeTrace): the ops in the order they
// ended, runs of one stage as one mark at the end of the run's last op.
// The first op's mark also covers the clone before it; descriptors
// closed on the way count with the stage after them.
func (p *childProg) marks() []nsinit.Mark {
	var ops []int
	for i, at := range p.times {
		if at != 0 {
			ops = append(ops, i)
		}
	}
	sort.SliceStable(ops, func(a, b int) bool { return p.times[ops[a]] < p.times[ops[b]] })
	label := func(i int) string {
		w := p.what[i]
		switch {
		case i == 0:
			return "clone, namespaces, id maps"
		case w.stage == "start" && strings.HasPrefix(w.what, "hand the command's pid"):
			return "command started"
		case w.stage == "start":
			return "" // descriptors closed, the memory made undumpable
		case w.stage == "gate":
			return "waited for the gate"
		case w.stage == "rlimits" || w.stage == "command":
			return "command's process: " + w.stage
		}
		return w.stage
	}
	var labels []int // ops with a label of their own
	for _, i := range ops {
		if label(i) != "" {
			labels = append(labels, i)
		}
	}
	var out []nsinit.Mark
	for k, i := range labels {
		l := label(i)
		if k+1 < len(labels) && label(labels[k+1]) == l {
			continue
		}
		out = append(out, nsinit.Mark{Stage: l, At: p.times[i]})
	}
	return out
}

// runProg runs p in a vfork child and never returns: it ends with an
// exec, or writes the failed op's index and errno to pipe and exits.
// In the child: raw system calls only, no allocation, no stack growth.
//
// A vfork op makes a second child that shares this stack: it runs first
// (this process is suspended until it executes) and leaves this frame's
// variables as it had them; this process then continues at the op
// recorded in p.forkAt, which the second child does not change.
//
//go:norace
//go:nosplit
func runProg(p *childProg, pipe int) {
	var a [8]uintptr
	var rec [2]uintptr
	var r1 uintptr
	var e syscall.Errno
	var ts unix.Timespec
	i := 0
	for i < len(p.ops) {
		o := &p.ops[i]
		for j := 0; j < 6; j++ {
			a[j] = o.a[j] + uintptr(o.p[j])
		}
		if o.in > 0 {
			a[o.inArg&7] = p.slots[o.in&15]
		}
		if o.mem != nil {
			*o.mem = int32(p.slots[o.memSlot&15])
		}
		if o.kind == opVfork {
			p.forkAt = i
			r1, e = rawVfork(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|uintptr(syscall.SIGCHLD), 0, 0)
			if e != 0 {
				goto fail
			}
			if r1 == 0 {
				// The second child: on with the next op.
				i++
				continue
			}
			// Back in the first: i and o are as the second child left
			// them.
			i = p.forkAt
			o = &p.ops[i]
			if o.out > 0 {
				p.slots[o.out&15] = r1
			}
			i = int(o.next)
			continue
		}
		if o.kind == opSkip {
			i++
			continue
		}
		if o.kind == opExecs {
			e = syscall.ENOENT
			for k := uintptr(0); ; k++ {
				path := *(*uintptr)(unsafe.Add(o.p[0], k*unsafe.Sizeof(uintptr(0))))
				if path == 0 {
					break
				}
				_, _, e = syscall.RawSyscall(unix.SYS_EXECVE, path, a[1], a[2])
			}
			goto fail
		}
		r1, _, e = syscall.RawSyscall6(o.nr, a[0], a[1], a[2], a[3], a[4], a[5])
		if i < len(p.times) {
			syscall.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)), 0)
			p.times[i] = ts.Sec*1e9 + ts.Nsec
		}
		if e != 0 && e != o.ok {
			if o.kind == opTry || o.kind == opOr {
				i++
				continue
			}
			goto fail
		}
		if o.kind == opWait && (r1 != 1 || p.released != releaseGo) {
			e = syscall.ECANCELED
			goto fail
		}
		if o.out > 0 {
			p.slots[o.out&15] = r1
		}
		i++
		if o.kind == opOr {
			i++ // its fallback is not needed
		}
	}
	e = syscall.EINVAL // a program that does not end with an exec
fail:
	rec[0], rec[1] = uintptr(e), uintptr(i)+1
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&rec[0])), unsafe.Sizeof(rec))
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 253, 0, 0)
	}
}
