//go:build amd64 || arm64

package native

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/reaper"
	"golang.org/x/sys/unix"
)

// The direct start. The init's work — the root, the restrictions, the
// command's start — is done by the vfork child of this process itself,
// as a list of system calls prepared here (childProg), instead of by a Go
// program started in the namespaces first: no second Go runtime's start
// and exit before the command, no configuration to encode and decode.
//
// The child becomes PID 1 of the new namespaces, builds the root as
// nsinit.setupRoot does, drops every privilege and applies landlock and
// seccomp, then makes the command's process by a second vfork; that one
// sets the rlimits and executes the command. PID 1 then executes the
// reaper (package reaper, a few dozen instructions without a runtime,
// from a sealed memfd), which reaps what the command leaves, kills
// everything when the command ends and reports the command's wait
// status: the command never runs as PID 1, whose signals the kernel
// filters.

// The gate (exec.start recorded) runs beside the build, as with the Go
// init: PID 1, restricted and ready, waits for one byte on directGate
// before it makes the command's process. The parent's thread meanwhile
// waits in the clone, as in a blocking system call (vforkBlocking: its
// Go P is free for the goroutine that writes the byte).
//
// Go's ForkLock is taken before the clone, and vforkProcess.Start would
// hold it until PID 1 executes the reaper: through the whole build and
// the gate, so that concurrent starts would queue behind one another.
// What needs it is the process's dumpable flag (vforkProcess.Start), and
// once the child has written its id maps nothing of PID 1 depends on it:
// its first op tells the parent so, on directGate, and the parent gives
// ForkLock up (forkHandoff). That holds only when nothing of PID 1 makes
// the shared memory undumpable later, which guards it from the command
// (below): with landlock, the command is kept out of /proc/1 by a
// landlock domain of its own instead, nested in PID 1's, and a nested
// domain may not ptrace an outer one. Without landlock (degraded), PID 1
// undumps and ForkLock is held to the end, as before.

// Descriptors of the direct child (PID 1), from its ExtraFiles.
const (
	directStatus = reaper.StatusFD // 4
	directReaper = 5               // the reaper's memfd
	directPidR   = reaper.PidFD    // 6
	directPidW   = reaper.UpperFD  // 7, then the workspace of a throw-away change set
	// directGate is PID 1's end of a socket pair: "id maps written"
	// goes out on it, the gate's verdict (gated runs) comes in.
	directGate  = 8
	directTrees = 9 // the idmapped trees (root callers), in order
)

// capLastCap is the highest capability number of this kernel.
var capLastCap = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return 40
})

// mountSetattrWorks says whether the kernel has mount_setattr (5.12),
// which the direct start's read-only binds use.
var mountSetattrWorks = sync.OnceValue(func() bool {
	attr := unix.MountAttr{}
	err := unix.MountSetattr(-1, "/nonexistent-fluffy", 0, &attr)
	return err != unix.ENOSYS
})

// directOpts are a direct start's facts beyond its configuration.
type directOpts struct {
	// scratch is the spec's Scratch: the command's environment is made
	// there.
	scratch sandbox.Scratch
	// trees is the number of idmapped trees given from directTrees on
	// (cfg.LowerFD).
	trees int
	// gated makes PID 1 wait for the release on directGate before the
	// command's process is made.
	gated bool
	// pid1Pause (tests) makes PID 1 sleep before it becomes the reaper,
	// while the command already runs.
	pid1Pause time.Duration
	// ahead builds an ahead start's program (ahead_linux.go): gated, its
	// command's rlimits and exec left as placeholders (childProg.tail)
	// that fillTail fills in for the request that takes it.
	ahead bool
}

// The direct start's new root and the host's root under it while it is
// built, and the stage name of its mount steps.
const (
	directNewRoot = "/newroot"
	directOldRoot = "/oldroot"
	directMount   = "mount"
)

// directProg builds the direct child's program for cfg.
func directProg(cfg *nsinit.Config, o directOpts) (*childProg, error) {
	trees, gated := o.trees, o.gated || o.ahead
	p := &childProg{}
	const mnt = directMount
	// nested: the command gets a landlock domain of its own, and PID 1
	// never touches the dumpable flag (above).
	nested := cfg.Landlock > 0
	if nested {
		b := &[1]byte{'m'}
		op := childOp{nr: unix.SYS_WRITE, a: [6]uintptr{directGate, 0, 1}}
		op.p[1] = p.ptr(b, unsafe.Pointer(b))
		p.add(mnt, "tell the parent the id maps are written", op)
		p.handsOff = true
	}
	p.raiseOOMScore()
	if err := p.buildRoot(cfg, trees); err != nil {
		return nil, err
	}

	// Every restriction but the rlimits is PID 1's, before the command's
	// process is made, so that it inherits them: the reaper (which PID 1
	// becomes) must be as restricted as the command, which could write
	// its memory (/proc/1/mem, same uid), and must be in the command's
	// landlock domain or an outer one, or landlock's signal scoping
	// refuses its kill of what the command leaves.
	if err := p.restrict(cfg); err != nil {
		return nil, err
	}
	if gated {
		p.waitRelease("gate", "wait for the gate (exec.start recorded)", directGate)
	}
	p.closeFD(directGate)
	// PID 1 shares this process's memory until it becomes the reaper,
	// while the command, the same user, already runs: that memory must be
	// closed to the command's /proc/1 (environ, mem, maps: ptrace access
	// checks). With landlock the command's own nested domain does it
	// (below). Without, PID 1 makes the memory undumpable, which then
	// needs CAP_SYS_PTRACE over fluffy's own user namespace. That flag
	// is the memory's, so fluffy's too for that moment
	// (vforkProcess.Start sets it back); the command and the reaper get
	// fresh memory, dumpable again, at their exec.
	if !nested {
		p.call("start", "make the shared memory undumpable", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0)
		p.undumps = true
	}
	// The command's process.
	fork := p.add("start", "vfork the command", childOp{kind: opVfork, out: 1})
	p.commandOps(cfg, o, nested)
	// PID 1, once the command is executing: hand its pid to the reaper
	// and become the reaper.
	p.ops[fork].next = int32(len(p.ops))
	p.reaperOps(cfg, o, nested)
	if p.err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, p.err)
	}
	return p, nil
}

// buildRoot adds the ops that build the sandbox's root: a scratch root
// to work from, the system tree, /tmp, the workspace and extra mounts
// (parents before children), the pivot into the new root, the hostname
// and the working directory.
func (p *childProg) buildRoot(cfg *nsinit.Config, trees int) error {
	const nr, or = directNewRoot, directOldRoot
	const mnt, pivot = directMount, "pivot_root"
	p.mount(mnt, "make / private", "", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	p.mount(mnt, "scratch tmpfs", "tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k")
	p.mkdir(mnt, "/tmp"+or, 0o755, false)
	op := childOp{nr: unix.SYS_PIVOT_ROOT}
	op.p[0], op.p[1] = p.str("/tmp"), p.str("/tmp"+or)
	p.add(pivot, "pivot to scratch", op)
	p.chdir(mnt, "chdir /", "/")
	p.mkdir(mnt, nr, 0o755, false)
	p.mount(mnt, "root tmpfs", "tmpfs", nr, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m")
	if err := p.systemTree(); err != nil {
		return err
	}
	p.mkdir(mnt, nr+"/tmp", 0o1777, false)
	tmpOpts := "mode=1777"
	if cfg.TmpSize > 0 {
		tmpOpts += ",size=" + strconv.FormatInt(cfg.TmpSize, 10)
	}
	p.mount(mnt, "tmp", "tmpfs", nr+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts)

	// The idmapped trees (root callers), attached in the scratch root.
	mountSrc := func(i int) string { return or + cfg.Mounts[i].Source }
	if cfg.LowerFD {
		if err := p.attachTrees(cfg, trees); err != nil {
			return err
		}
		mountSrc = func(i int) string { return "/m" + strconv.Itoa(i) }
	}
	// The workspace and extra mounts, parents before children.
	type m struct {
		target string
		do     func()
	}
	var ms []m
	if cfg.Workspace != "" {
		ws := cfg.Workspace
		if cfg.WorkspaceRO {
			ms = append(ms, m{ws, func() {
				p.mountPoint(nr+ws, true)
				p.bind(or+ws, nr+ws, false, ws)
			}})
		} else {
			ms = append(ms, m{ws, func() { p.overlayWorkspace(cfg) }})
		}
	}
	for i, mo := range cfg.Mounts {
		src := mountSrc(i)
		dir := true
		if st, err := os.Stat(mo.Source); err == nil && !st.IsDir() {
			dir = false
		}
		ms = append(ms, m{mo.Target, func() {
			p.mountPoint(nr+mo.Target, dir)
			p.bind(src, nr+mo.Target, mo.Writable, mo.Target)
		}})
	}
	sort.SliceStable(ms, func(i, j int) bool { return strings.Count(ms[i].target, "/") < strings.Count(ms[j].target, "/") })
	for _, x := range ms {
		x.do()
	}
	if cfg.OverlayRO && cfg.Workspace != "" && !cfg.WorkspaceRO {
		// Last, so that the mount points of the masks inside the
		// workspace could still be made.
		p.mount("overlay", "overlay at "+cfg.Workspace+" read-only", "", nr+cfg.Workspace, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
	}
	// Into the new root; the host's root goes away entirely.
	p.chdir(pivot, "chdir to the new root", nr)
	op = childOp{nr: unix.SYS_PIVOT_ROOT}
	op.p[0], op.p[1] = p.str("."), p.str(".")
	p.add(pivot, "pivot to the sandbox root", op)
	op = childOp{nr: unix.SYS_UMOUNT2, a: [6]uintptr{0, unix.MNT_DETACH}}
	op.p[0] = p.str(".")
	p.add(pivot, "detach the old root", op)
	p.chdir(pivot, "chdir /", "/")
	p.mount(mnt, "read-only root", "", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")

	host := p.str("sandbox")
	// As the init does, a failure here is not fatal (opTry).
	p.add("hostname", "sethostname", childOp{nr: unix.SYS_SETHOSTNAME, p: [6]unsafe.Pointer{host}, a: [6]uintptr{0, 7}, kind: opTry})
	p.add("hostname", "setdomainname", childOp{nr: unix.SYS_SETDOMAINNAME, p: [6]unsafe.Pointer{host}, a: [6]uintptr{0, 7}, kind: opTry})
	if cfg.Dir != "" {
		p.chdir("chdir", "working directory "+cfg.Dir, cfg.Dir)
	}
	return nil
}

// commandOps adds the ops of the command's process, after the vfork that
// makes it: its rlimits, its nested landlock domain, its exec (a
// placeholder for an ahead start, filled at the request).
func (p *childProg) commandOps(cfg *nsinit.Config, o directOpts, nested bool) {
	for _, fd := range []int{directStatus, directReaper, directPidR, directPidW} {
		p.closeFD(fd)
	}
	if o.ahead {
		p.aheadRlimits()
	} else {
		for _, rl := range cfg.Rlimits {
			lim := &unix.Rlimit{Cur: rl.Value, Max: rl.Value}
			p.add("rlimits", "resource "+strconv.Itoa(rl.Resource), childOp{nr: unix.SYS_PRLIMIT64, a: [6]uintptr{0, uintptr(rl.Resource)}, p: [6]unsafe.Pointer{2: p.ptr(lim, unsafe.Pointer(lim))}})
		}
	}
	if nested {
		// The same rules again, as a domain nested in PID 1's: the
		// command and all it starts may not ptrace PID 1 (nor read its
		// /proc/1/mem, environ, maps), while PID 1, in the outer domain,
		// may still signal them (landlock's signal scoping).
		p.add("landlock", "landlock_restrict_self (the command's nested domain)", childOp{nr: unix.SYS_LANDLOCK_RESTRICT_SELF, in: landlockRuleset, inArg: 0})
		p.add("landlock", "close the ruleset", childOp{nr: unix.SYS_CLOSE, in: landlockRuleset, inArg: 0})
	}
	if o.ahead {
		p.tail.exec = p.add("command", "execute the request's command", childOp{kind: opSkip})
	} else {
		op, what := p.execOp(cfg, o.scratch)
		p.add("command", what, op)
	}
}

// reaperOps adds PID 1's last ops, once the command is executing: hand
// its pid to the reaper, give the reaper the workspace (a throw-away
// change set's report), close the rest and become the reaper.
func (p *childProg) reaperOps(cfg *nsinit.Config, o directOpts, nested bool) {
	var op childOp
	if nested {
		p.add("start", "close the ruleset", childOp{nr: unix.SYS_CLOSE, in: landlockRuleset, inArg: 0})
	}
	upperWS := cfg.UpperSize > 0 && cfg.Workspace != "" && !cfg.WorkspaceRO
	if upperWS {
		// The reaper reports on the throw-away change set through the
		// workspace's overlay (whose statfs is its upper layer's), on
		// reaper.UpperFD: opened while directPidW still holds that
		// number, moved there once it is closed.
		op = childOp{nr: unix.SYS_OPENAT, a: [6]uintptr{uintptr(atFDCWD), 0, unix.O_PATH | unix.O_DIRECTORY}, out: upperSlot}
		op.p[1] = p.str(cfg.Workspace)
		p.add("start", "open the workspace for the reaper", op)
	}
	op = childOp{nr: unix.SYS_WRITE, a: [6]uintptr{directPidW, 0, 8}}
	op.p[1] = unsafe.Pointer(&p.slots[1])
	p.add("start", "hand the command's pid to the reaper", op)
	p.closeFD(directPidW)
	if upperWS {
		p.add("start", "the workspace to the reaper's descriptor", childOp{nr: unix.SYS_DUP3, a: [6]uintptr{0, reaper.UpperFD, 0}, in: upperSlot, inArg: 0})
		p.add("start", "close the workspace's first descriptor", childOp{nr: unix.SYS_CLOSE, in: upperSlot, inArg: 0})
	}
	for fd := 0; fd <= 2; fd++ {
		p.closeFD(fd)
	}
	if o.pid1Pause > 0 {
		ts := unix.NsecToTimespec(o.pid1Pause.Nanoseconds())
		p.add("start", "pause (test)", childOp{nr: unix.SYS_NANOSLEEP, p: [6]unsafe.Pointer{p.ptr(&ts, unsafe.Pointer(&ts))}})
	}
	op = childOp{nr: unix.SYS_EXECVEAT, a: [6]uintptr{directReaper, 0, 0, 0, unix.AT_EMPTY_PATH}}
	op.p[1], op.p[2], op.p[3] = p.str(""), p.strv([]string{"fluffy-sandbox-reaper"}), p.strv(nil)
	p.add("start", "execute the reaper", op)
}

// systemTree puts the host's system directories (read-only binds, their
// symlinks as they are), /proc and a read-only /dev of the usual devices
// into the new root.
func (p *childProg) systemTree() error {
	const nr, or, mnt = directNewRoot, directOldRoot, directMount
	for _, d := range nsinit.SystemDirs() {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(d)
			if err != nil {
				return fmt.Errorf("symlink %s: %w", d, err)
			}
			p.symlink(mnt, t, nr+d)
			continue
		}
		p.mkdir(mnt, nr+d, 0o755, true)
		p.bind(or+d, nr+d, false, d)
	}
	p.mkdir(mnt, nr+"/proc", 0o555, false)
	p.mount(mnt, "proc", "proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	dev := nr + "/dev"
	p.mkdir(mnt, dev, 0o755, false)
	p.mount(mnt, "dev", "tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
	for _, d := range nsinit.Devices() {
		p.file(mnt, dev+"/"+d)
		p.mount(mnt, "dev/"+d, or+"/dev/"+d, dev+"/"+d, "", unix.MS_BIND, "")
	}
	for _, l := range [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}} {
		p.symlink(mnt, l[1], dev+"/"+l[0])
	}
	p.mount(mnt, "dev read-only", "", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
	return nil
}

// overlayWorkspace mounts the workspace at its path in the new root: an
// overlay of the change set's upper directory on the workspace, and for
// a throw-away change set (cfg.UpperSize) the tmpfs that bounds it, with
// the count of inodes the overlay made itself (p.upperBase).
func (p *childProg) overlayWorkspace(cfg *nsinit.Config) {
	const nr, or, mnt = directNewRoot, directOldRoot, directMount
	ws := cfg.Workspace
	p.mountPoint(nr+ws, true)
	lower, upper, work := or+ws, or+cfg.Upper, or+cfg.Work
	csDir := or + filepath.Dir(cfg.Upper)
	if cfg.LowerFD {
		lower, upper, work = "/lower", "/cs/"+filepath.Base(cfg.Upper), "/cs/"+filepath.Base(cfg.Work)
		csDir = "/cs"
	}
	if cfg.UpperSize > 0 {
		// A throw-away change set: bounded, in this mount
		// namespace only (nsinit.Config.UpperSize).
		p.mount(mnt, "the change set's tmpfs", "tmpfs", csDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size="+strconv.FormatInt(cfg.UpperSize, 10))
		p.mkdir(mnt, upper, 0o755, false)
		p.mkdir(mnt, work, 0o755, false)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper, work)
	// volatile: see nsinit.setupRoot; kernels before 5.10 lack it.
	i := p.mount("overlay", "overlay at "+ws, "overlay", nr+ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts+",volatile")
	p.ops[i].kind = opOr
	p.mount("overlay", "overlay at "+ws, "overlay", nr+ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	if cfg.UpperSize > 0 {
		// The inodes the overlay made itself (its work
		// directories, its checks), into this process's
		// memory, which the child shares: the reaper's
		// count at the end is compared with it.
		p.upperBase = &unix.Statfs_t{}
		op := childOp{nr: unix.SYS_STATFS}
		op.p[0], op.p[1] = p.str(nr+ws), p.ptr(p.upperBase, unsafe.Pointer(p.upperBase))
		p.add("overlay", "statfs the change set's tmpfs", op)
	}
}

// attachTrees attaches the idmapped trees a root caller hands over
// (cfg.LowerFD) in the scratch root: the workspace at /lower, the change
// sets' directory at /cs, and each extra mount at /m<i>.
func (p *childProg) attachTrees(cfg *nsinit.Config, trees int) error {
	if trees != 2+len(cfg.Mounts) {
		return fmt.Errorf("direct start: %d idmapped trees for %d mounts", trees, len(cfg.Mounts))
	}
	for i := 0; i < trees; i++ {
		at := "/m" + strconv.Itoa(i-2)
		switch i {
		case 0:
			at = "/lower"
		case 1:
			at = "/cs"
		}
		dir := true
		if i >= 2 {
			if st, err := os.Stat(cfg.Mounts[i-2].Source); err == nil && !st.IsDir() {
				dir = false
			}
		}
		if dir {
			p.mkdir(directMount, at, 0o755, false)
		} else {
			p.file(directMount, at)
		}
		op := childOp{nr: unix.SYS_MOVE_MOUNT, a: [6]uintptr{uintptr(directTrees + i), 0, uintptr(atFDCWD), 0, unix.MOVE_MOUNT_F_EMPTY_PATH}}
		op.p[1], op.p[3] = p.str(""), p.str(at)
		p.add(directMount, "attach the idmapped "+at, op)
		p.closeFD(directTrees + i)
	}
	return nil
}

// mountPoint creates the directory or empty file a mount goes on, and
// its missing parents (existing ones will do).
func (p *childProg) mountPoint(path string, dir bool) {
	var parents []string
	for d := filepath.Dir(path); d != "/newroot" && d != "/" && d != "."; d = filepath.Dir(d) {
		parents = append(parents, d)
	}
	for i := len(parents) - 1; i >= 0; i-- {
		p.mkdir("mount", parents[i], 0o755, true)
	}
	if dir {
		p.mkdir("mount", path, 0o755, true)
	} else {
		p.file("mount", path)
	}
}

// bind binds src onto dst recursively, nosuid, nodev and read-only
// unless writable (dst exists).
func (p *childProg) bind(src, dst string, writable bool, name string) {
	p.mount("mount", "bind "+name, src, dst, "", unix.MS_BIND|unix.MS_REC, "")
	set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if !writable {
		set |= unix.MOUNT_ATTR_RDONLY
	}
	p.mountSetattr("mount", "bind "+name+": set read-only", dst, set)
}

// restrict appends nsinit.Main's restrictions, in its order: every
// capability dropped (securebits locked), no_new_privs, landlock,
// seccomp (the rlimits, which come next there, are the command's only).
func (p *childProg) restrict(cfg *nsinit.Config) error {
	p.dropCaps()
	if cfg.Landlock > 0 {
		if err := p.landlock(cfg); err != nil {
			return err
		}
	}
	if len(cfg.Seccomp) > 0 {
		prog := cfg.Seccomp
		if len(prog)%8 != 0 {
			return fmt.Errorf("seccomp: malformed filter of %d bytes", len(prog))
		}
		filter := make([]unix.SockFilter, len(prog)/8)
		for i := range filter {
			b := prog[i*8:]
			filter[i] = unix.SockFilter{Code: *(*uint16)(unsafe.Pointer(&b[0])), Jt: b[2], Jf: b[3], K: *(*uint32)(unsafe.Pointer(&b[4]))}
		}
		fprog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		p.keep = append(p.keep, filter)
		p.add("seccomp", "seccomp filter", childOp{nr: unix.SYS_SECCOMP, a: [6]uintptr{unix.SECCOMP_SET_MODE_FILTER}, p: [6]unsafe.Pointer{2: p.ptr(fprog, unsafe.Pointer(fprog))}})
	}
	return nil
}

// dropCaps appends nsinit.dropCapabilities and no_new_privs: every
// capability set emptied, and none regained by an exec as uid 0
// (SECBIT_NOROOT, locked).
func (p *childProg) dropCaps() {
	const caps = "capabilities"
	bits := uintptr(0xef) // nsinit.dropCapabilities' securebits
	p.call(caps, "securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits)
	for c := 0; c <= capLastCap(); c++ {
		p.call(caps, "bounding set, cap "+strconv.Itoa(c), unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c))
	}
	p.call(caps, "ambient", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL)
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	p.add(caps, "capset", childOp{nr: unix.SYS_CAPSET, p: [6]unsafe.Pointer{p.ptr(hdr, unsafe.Pointer(hdr)), p.ptr(data, unsafe.Pointer(&data[0]))}})
	p.call("no_new_privs", "no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1)
}

// landlock appends nsinit.applyLandlock's ruleset: read everywhere,
// write in /tmp, the workspace, writable mounts and the devices.
func (p *childProg) landlock(cfg *nsinit.Config) error {
	fs, net, scoped := nsinit.LandlockABI(cfg.Landlock)
	if fs == 0 {
		return fmt.Errorf("unknown landlock ABI %d", cfg.Landlock)
	}
	if !cfg.LandlockNet {
		net = 0
	}
	attr := &[3]uint64{fs, net, scoped}
	size := uintptr(24)
	if scoped == 0 {
		size = 16
		if net == 0 {
			size = 8
		}
	}
	const ll, ruleset = "landlock", landlockRuleset
	p.add(ll, "landlock_create_ruleset", childOp{nr: unix.SYS_LANDLOCK_CREATE_RULESET, p: [6]unsafe.Pointer{p.ptr(attr, unsafe.Pointer(attr))}, a: [6]uintptr{0, size}, out: ruleset})
	type rule struct {
		path   string
		access uint64
	}
	rules := []rule{{"/", nsinit.LandlockRead}}
	rw := []string{"/tmp"}
	isDir := map[string]bool{"/tmp": true}
	if cfg.Workspace != "" && !cfg.WorkspaceRO && !cfg.OverlayRO {
		rw = append(rw, cfg.Workspace)
		isDir[cfg.Workspace] = true
	}
	for _, m := range cfg.Mounts {
		if m.Writable {
			rw = append(rw, m.Target)
			st, err := os.Stat(m.Source)
			isDir[m.Target] = err != nil || st.IsDir()
		}
	}
	for _, path := range rw {
		access := uint64(nsinit.LandlockReadWrite)
		if !isDir[path] {
			access &= nsinit.LandlockFileOnly
		}
		rules = append(rules, rule{path, access})
	}
	for _, d := range nsinit.Devices() {
		rules = append(rules, rule{"/dev/" + d, nsinit.LandlockReadWrite & nsinit.LandlockFileOnly})
	}
	const fd = 3
	for _, r := range rules {
		what := "landlock rule for " + r.path
		op := childOp{nr: unix.SYS_OPENAT, a: [6]uintptr{uintptr(atFDCWD), 0, unix.O_PATH | unix.O_CLOEXEC}, out: fd}
		op.p[1] = p.str(r.path)
		p.add(ll, what, op)
		// struct landlock_path_beneath_attr is packed: allowed_access
		// (u64), then parent_fd (s32).
		attr := &[12]byte{}
		*(*uint64)(unsafe.Pointer(&attr[0])) = r.access & fs
		op = childOp{nr: unix.SYS_LANDLOCK_ADD_RULE, a: [6]uintptr{0, 1}, in: ruleset, inArg: 0,
			mem: (*int32)(unsafe.Pointer(&attr[8])), memSlot: fd}
		op.p[2] = p.ptr(attr, unsafe.Pointer(attr))
		p.add(ll, what, op)
		p.add(ll, what, childOp{nr: unix.SYS_CLOSE, in: fd, inArg: 0})
	}
	p.add(ll, "landlock_restrict_self", childOp{nr: unix.SYS_LANDLOCK_RESTRICT_SELF, in: ruleset, inArg: 0})
	// The ruleset stays open: the command's process applies it again
	// (directProg), and both branches close it.
	return nil
}

// landlockRuleset is the slot that holds the landlock ruleset's
// descriptor; upperSlot the workspace's, for the reaper; oomSlot the
// oom_score_adj file's, for a moment.
const (
	landlockRuleset = 2
	upperSlot       = 4
	oomSlot         = 5
)

// raiseOOMScore makes the sandbox the OOM killer's first choice (PID 1,
// and the command, which inherits it): it writes nsinit.OOMScoreAdj to
// /proc/self/oom_score_adj while the host's /proc is still there. Raising
// needs no privilege; each step may fail (a /proc without the file) and
// the start goes on, as it would without.
func (p *childProg) raiseOOMScore() {
	const stage = "start"
	open := childOp{nr: unix.SYS_OPENAT, a: [6]uintptr{uintptr(atFDCWD), 0, unix.O_WRONLY | unix.O_CLOEXEC}, out: oomSlot, kind: opTry}
	open.p[1] = p.str("/proc/self/oom_score_adj")
	p.add(stage, "open /proc/self/oom_score_adj", open)
	v := []byte(nsinit.OOMScoreAdj)
	write := childOp{nr: unix.SYS_WRITE, a: [6]uintptr{0, 0, uintptr(len(v))}, in: oomSlot, inArg: 0, kind: opTry}
	write.p[1] = p.ptr(v, unsafe.Pointer(&v[0]))
	p.add(stage, "raise oom_score_adj", write)
	p.add(stage, "close /proc/self/oom_score_adj", childOp{nr: unix.SYS_CLOSE, in: oomSlot, inArg: 0, kind: opTry})
}

// execOp returns the command's exec: its path, or each candidate of the
// sandbox's PATH in turn (nsinit.lookPath's search, done by execve), and
// what its failure means.
func (p *childProg) execOp(cfg *nsinit.Config, sc sandbox.Scratch) (childOp, string) {
	argv, envv := p.strv(cfg.Argv), p.envv(cfg.Env, sc)
	name := cfg.Argv[0]
	cands := []string{name}
	path := "/usr/local/bin:/usr/bin:/bin"
	what := "execute " + name
	if !strings.Contains(name, "/") {
		for _, e := range cfg.Env {
			if v, ok := strings.CutPrefix(e, "PATH="); ok {
				path = v
			}
		}
		cands = cands[:0]
		for _, dir := range filepath.SplitList(path) {
			if dir == "" {
				dir = "."
			}
			cands = append(cands, filepath.Join(dir, name))
		}
		what = fmt.Sprintf("%s: command not found in the sandbox (PATH=%s)", name, path)
	}
	return childOp{kind: opExecs, p: [6]unsafe.Pointer{p.strv(cands), argv, envv}}, what
}
