package nsinit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Arg0 is argv[0] of the re-executed fluffy binary when it acts as
// the sandbox init. main dispatches on it before anything else runs.
const Arg0 = "fluffy-sandbox-init"

// IsInit reports whether this process was started as the sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == Arg0 }

// InitMain runs the sandbox init: PID 1 of fresh user, mount, PID, network,
// IPC, UTS and cgroup namespaces, with full capabilities inside its user
// namespace only. It reads its Config from fd 3, builds the minimal
// root and pivots into it, drops every capability, sets no_new_privs,
// applies landlock, seccomp and rlimits to the thread that will fork the
// command, starts the command, reaps every process until the command
// exits, kills what is left and reports an Status on fd 4. It returns
// the process exit status (the parent reads the status pipe, not this).
func Main() int {
	// Every restriction below is per thread where the kernel makes it so
	// (capabilities, seccomp without TSYNC); the command is forked from
	// this very thread.
	runtime.LockOSThread()
	// The OOM killer's first choice, before the daemon that runs it;
	// the host's /proc is still mounted here. Raising needs no privilege.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte(OOMScoreAdj), 0)
	tr := &Tracer{On: true}
	tr.Mark("go runtime started")
	start := time.Now()
	statusFile := os.NewFile(4, "status")
	st := Status{}
	fail := func(stage string, err error) int {
		st.Stage, st.Error = stage, err.Error()
		st.NotFound = errors.Is(err, errNotFound)
		st.Marks = tr.Marks
		writeStatus(statusFile, &st)
		return 125
	}
	cfgFile := os.NewFile(3, "config")
	// Sized to the frame so that the release byte stays in the pipe
	// until it is read below, straight from the file.
	var hdr [4]byte
	if _, err := io.ReadFull(cfgFile, hdr[:]); err != nil {
		return fail("config", err)
	}
	cfgIn := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(hdr[:]), io.LimitReader(cfgFile, int64(binary.BigEndian.Uint32(hdr[:])))), 4096)
	var cfg Config
	body, err := ReadFrame(cfgIn)
	if err == nil {
		cfg, err = DecodeConfig(body)
	}
	if err != nil {
		return fail("config", err)
	}
	for fd := 3; fd <= ProxyFD; fd++ {
		unix.CloseOnExec(fd)
	}
	if !cfg.Trace {
		tr = &Tracer{}
	}
	tr.Mark("config read")

	if stage, err := setupRoot(&cfg, tr); err != nil {
		return fail(stage, err)
	}
	if cfg.Probe {
		st.SetupNanos = int64(time.Since(start))
		st.Marks = tr.Marks
		writeStatus(statusFile, &st)
		return 0
	}
	if cfg.ProxySocket != "" {
		// The forwarder runs in this process for the command's lifetime;
		// it is listening before the command starts.
		stop, err := startForwarder(&cfg)
		if err != nil {
			return fail("network", err)
		}
		defer stop()
	}
	_ = unix.Sethostname([]byte("sandbox"))
	_ = unix.Setdomainname([]byte("sandbox"))
	if cfg.Dir != "" {
		if err := unix.Chdir(cfg.Dir); err != nil {
			return fail("chdir", fmt.Errorf("working directory %s: %w", cfg.Dir, err))
		}
	}
	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return fail("command", err)
	}
	tr.Mark("hostname, chdir, command lookup")
	if err := dropCapabilities(); err != nil {
		return fail("capabilities", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs", err)
	}
	tr.Mark("capabilities dropped, no_new_privs")
	if cfg.Landlock > 0 {
		if err := applyLandlock(&cfg); err != nil {
			return fail("landlock", err)
		}
	}
	tr.Mark("landlock")
	if len(cfg.Seccomp) > 0 {
		if err := applySeccomp(cfg.Seccomp); err != nil {
			return fail("seccomp", err)
		}
	}
	tr.Mark("seccomp")
	var asLimit *unix.Rlimit
	for _, rl := range cfg.Rlimits {
		lim := unix.Rlimit{Cur: rl.Value, Max: rl.Value}
		if rl.Resource == unix.RLIMIT_AS {
			// The init's own Go runtime needs address space: this one is
			// set on the command right after it starts.
			asLimit = &lim
			continue
		}
		if err := unix.Setrlimit(rl.Resource, &lim); err != nil {
			return fail("rlimits", fmt.Errorf("resource %d: %w", rl.Resource, err))
		}
	}
	// The parent releases the init once it is in its cgroup.
	var rel [1]byte
	if _, err := io.ReadFull(cfgFile, rel[:]); err != nil || rel[0] != Release {
		return fail("release", fmt.Errorf("the parent did not release the sandbox (%v)", err))
	}
	cfgFile.Close()
	tr.Mark("released by the parent")
	// Forked from this thread, which holds every restriction above.
	cmdPid, err := syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{Env: cfg.Env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		return fail("start", err)
	}
	st.Started = true
	if asLimit != nil {
		if err := unix.Prlimit(cmdPid, unix.RLIMIT_AS, asLimit, nil); err != nil {
			_ = unix.Kill(-1, unix.SIGKILL)
			return fail("rlimits", fmt.Errorf("address space: %w", err))
		}
	}
	st.SetupNanos = int64(time.Since(start))
	tr.Mark("rlimits, command started")
	// Reap everything until the command itself ends.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail("wait", err)
		}
		if pid == cmdPid {
			if ws.Signaled() {
				st.ExitCode, st.Signal = -1, int(ws.Signal())
			} else {
				st.ExitCode = ws.ExitStatus()
			}
			break
		}
	}
	tr.Mark("command exited")
	// Nothing outlives the command.
	_ = unix.Kill(-1, unix.SIGKILL)
	for {
		if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
			break
		} else if err != nil && err != unix.EINTR {
			break
		}
	}
	var sfs unix.Statfs_t
	if unix.Statfs("/tmp", &sfs) == nil && sfs.Bavail == 0 {
		st.TmpFull = true
	}
	if cfg.UpperSize > 0 && cfg.Workspace != "" && !cfg.WorkspaceRO {
		var inodes int64
		st.UpperFull, inodes = upperState(cfg.Workspace)
		st.UpperWritten = inodes > cfg.upperBase
	}
	tr.Mark("rest killed and reaped")
	st.Marks = tr.Marks
	if tr.On {
		var ru unix.Rusage
		if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
			st.CommandCPU = [2]int64{ru.Utime.Nano(), ru.Stime.Nano()}
		}
	}
	// Every process that shared the output pipes is gone; with the init's
	// own copies closed the parent sees their end now, and so knows the
	// whole output (and whether it was cut) before this process's exit.
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Close(fd)
	}
	writeStatus(statusFile, &st)
	return 0
}

// writeStatus writes one framed Status.
func writeStatus(f *os.File, st *Status) error {
	_, err := f.Write(Frame(st.AppendBinary(nil)))
	return err
}

// receiveFDs reads n file descriptors sent with SCM_RIGHTS on sock.
func receiveFDs(sock, n int) ([]int, error) {
	defer unix.Close(sock)
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*n))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no descriptors received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != n {
		return nil, fmt.Errorf("want %d descriptors, got %d (%v)", n, len(fds), err)
	}
	return fds, nil
}

func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in the sandbox (PATH=%s)", name, errNotFound, path)
}

// errNotFound is lookPath's failure, reported in Status.NotFound.
var errNotFound = errors.New("command not found")

// systemDirs are bound read-only from the host (or recreated as the same
// symlinks, on merged-/usr systems).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

var devices = []string{"null", "zero", "full", "random", "urandom"}

const (
	oldRoot = "/oldroot"
	newRoot = "/newroot"
)

// setupRoot builds the sandbox's root file system and pivots into it. It
// returns the stage that failed.
func setupRoot(cfg *Config, tr *Tracer) (string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "mount", fmt.Errorf("make / private: %w", err)
	}
	// A scratch tmpfs becomes the root for a moment, with the host's root
	// at /oldroot; the real sandbox root is built at /newroot in it.
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return "mount", fmt.Errorf("scratch tmpfs: %w", err)
	}
	if err := os.Mkdir("/tmp"+oldRoot, 0o755); err != nil {
		return "mount", err
	}
	if err := unix.PivotRoot("/tmp", "/tmp"+oldRoot); err != nil {
		return "pivot_root", fmt.Errorf("pivot to scratch: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return "mount", err
	}
	if err := os.Mkdir(newRoot, 0o755); err != nil {
		return "mount", err
	}
	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return "mount", fmt.Errorf("root tmpfs: %w", err)
	}
	tr.Mark("mount: private, scratch root, root tmpfs")
	for _, d := range systemDirs {
		fi, err := os.Lstat(oldRoot + d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(oldRoot + d)
			if err == nil {
				err = os.Symlink(t, newRoot+d)
			}
			if err != nil {
				return "mount", fmt.Errorf("symlink %s: %w", d, err)
			}
			continue
		}
		if err := bindMount(oldRoot+d, newRoot+d, false, true); err != nil {
			return "mount", err
		}
		tr.Mark("mount: bind " + d)
	}
	tr.Mark("mount: system symlinks")
	if err := os.Mkdir(newRoot+"/proc", 0o555); err != nil {
		return "mount", err
	}
	if err := unix.Mount("proc", newRoot+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "mount", fmt.Errorf("proc: %w", err)
	}
	tr.Mark("mount: proc")
	if err := setupDev(); err != nil {
		return "mount", err
	}
	tr.Mark("mount: dev")
	if err := os.Mkdir(newRoot+"/tmp", 0o1777); err != nil {
		return "mount", err
	}
	tmpOpts := "mode=1777"
	if cfg.TmpSize > 0 {
		tmpOpts += fmt.Sprintf(",size=%d", cfg.TmpSize)
	}
	if err := unix.Mount("tmpfs", newRoot+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return "mount", fmt.Errorf("tmp: %w", err)
	}
	tr.Mark("mount: tmp")
	// The workspace and extra mounts, parents before children.
	type m struct {
		target string
		do     func() error
		stage  string
	}
	var ms []m
	// Root's sandboxes receive idmapped clones of the workspace, the
	// change set's directory and every extra mount: their host uid (the
	// sandbox's) need not be able to reach the host paths.
	mountSrc := func(i int) string { return oldRoot + cfg.Mounts[i].Source }
	if cfg.LowerFD {
		fds, err := receiveFDs(5, 2+len(cfg.Mounts))
		if err != nil {
			return "mount", fmt.Errorf("receive the idmapped workspace: %w", err)
		}
		tr.Mark("mount: idmapped trees received")
		for i, fd := range fds {
			at := fmt.Sprintf("/m%d", i-2)
			switch i {
			case 0:
				at = "/lower"
			case 1:
				at = "/cs"
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return "mount", fmt.Errorf("stat the idmapped %s: %w", at, err)
			}
			if err := mountPoint(at, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
				return "mount", err
			}
			if err := unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return "mount", fmt.Errorf("attach the idmapped %s: %w", at, err)
			}
			unix.Close(fd)
		}
		mountSrc = func(i int) string { return fmt.Sprintf("/m%d", i) }
	}
	if cfg.Workspace != "" {
		ws := cfg.Workspace
		if cfg.WorkspaceRO {
			ms = append(ms, m{ws, func() error { return bindMount(oldRoot+ws, newRoot+ws, false, true) }, "mount"})
		} else {
			ms = append(ms, m{ws, func() error {
				if err := mountPoint(newRoot+ws, true); err != nil {
					return err
				}
				lower, upper, work := oldRoot+ws, oldRoot+cfg.Upper, oldRoot+cfg.Work
				csDir := oldRoot + filepath.Dir(cfg.Upper)
				if cfg.LowerFD {
					lower, upper, work = "/lower", "/cs/"+filepath.Base(cfg.Upper), "/cs/"+filepath.Base(cfg.Work)
					csDir = "/cs"
				}
				if cfg.UpperSize > 0 {
					if err := upperTmpfs(csDir, upper, work, cfg.UpperSize); err != nil {
						return err
					}
				}
				// volatile: the overlay does not sync its upper layer,
				// neither on the command's fsync nor when it is unmounted
				// as the sandbox ends (a journal commit of the change
				// set's file system, milliseconds at every run). The
				// change set reaches the disk by the normal write-back,
				// like any file nobody syncs. Kernels before 5.10 lack it.
				opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper, work)
				err := unix.Mount("overlay", newRoot+ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts+",volatile")
				if err == unix.EINVAL {
					err = unix.Mount("overlay", newRoot+ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
				}
				if err != nil {
					return fmt.Errorf("overlay at %s: %w", ws, err)
				}
				if cfg.UpperSize > 0 {
					// What the overlay itself made (its work
					// directories, its checks) is not the command's.
					_, cfg.upperBase = upperState(newRoot + ws)
				}
				return nil
			}, "overlay"})
		}
	}
	for i, mo := range cfg.Mounts {
		src := mountSrc(i)
		ms = append(ms, m{mo.Target, func() error { return bindMount(src, newRoot+mo.Target, mo.Writable, false) }, "mount"})
	}
	sort.SliceStable(ms, func(i, j int) bool { return strings.Count(ms[i].target, "/") < strings.Count(ms[j].target, "/") })
	for _, x := range ms {
		if err := x.do(); err != nil {
			return x.stage, err
		}
		tr.Mark("mount: " + x.stage + " " + x.target)
	}
	if cfg.OverlayRO && cfg.Workspace != "" && !cfg.WorkspaceRO {
		// Last, so that the mount points of the masks inside the
		// workspace could still be made.
		if err := unix.Mount("", newRoot+cfg.Workspace, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return "overlay", fmt.Errorf("overlay at %s read-only: %w", cfg.Workspace, err)
		}
	}
	if cfg.ProxyFD {
		if err := attachProxySocket(newRoot + cfg.ProxySocket); err != nil {
			return "mount", err
		}
	}
	// Into the new root; the host's root goes away entirely.
	if err := unix.Chdir(newRoot); err != nil {
		return "pivot_root", err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return "pivot_root", fmt.Errorf("pivot to the sandbox root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return "pivot_root", fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return "pivot_root", err
	}
	tr.Mark("pivot_root, old root detached")
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return "mount", fmt.Errorf("read-only root: %w", err)
	}
	tr.Mark("mount: root read-only")
	return "", nil
}

// bindMount binds src onto dst (created as a directory or an empty file
// to match src), recursively, read-only unless writable.
func bindMount(src, dst string, writable, mkdirs bool) error {
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(src, oldRoot), err)
	}
	if err := mountPoint(dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return fmt.Errorf("bind %s: mount point: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(src, oldRoot), err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &attr); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return remountOld(dst, writable)
		}
		return fmt.Errorf("bind %s: set read-only: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	return nil
}

// mountPoint creates the directory or empty file (dir false) a mount
// goes on, and its missing parents; one that exists will do. It uses no
// os.File: os.OpenFile would start Go's poller (an epoll instance and an
// event fd) in the init for a file it only closes.
func mountPoint(p string, dir bool) error {
	mk := func() error {
		if dir {
			return unix.Mkdir(p, 0o755)
		}
		return unix.Mknod(p, unix.S_IFREG|0o644, 0)
	}
	err := mk()
	if err == unix.ENOENT {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = mk()
		}
	}
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err = unix.Stat(p, &st); err == nil && (st.Mode&unix.S_IFMT == unix.S_IFDIR) != dir {
			err = fmt.Errorf("%s exists and is not a %s", p, map[bool]string{true: "directory", false: "file"}[dir])
		}
	}
	if err != nil {
		return &os.PathError{Op: "mount point", Path: p, Err: err}
	}
	return nil
}

// remountOld makes a bind mount read-only on kernels without
// mount_setattr (before 5.12), keeping the flags a user namespace may not
// clear.
func remountOld(dst string, writable bool) error {
	var s unix.Statfs_t
	if err := unix.Statfs(dst, &s); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
	for st, ms := range map[int64]uintptr{unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME} {
		if s.Flags&st != 0 {
			flags |= ms
		}
	}
	if !writable {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", dst, "", flags, "")
}

func setupDev() error {
	dev := newRoot + "/dev"
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	for _, d := range devices {
		if err := mountPoint(dev+"/"+d, false); err != nil {
			return err
		}
		if err := unix.Mount(oldRoot+"/dev/"+d, dev+"/"+d, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("dev/%s: %w", d, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
}

// Secure bits (linux/securebits.h).
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)

// dropCapabilities empties every capability set of this thread, so the
// command (forked from it) starts with none and cannot regain any by
// executing a program as uid 0 (SECBIT_NOROOT, locked).
func dropCapabilities() error {
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked | secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; ; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL && c > 0 {
				break
			}
			return fmt.Errorf("bounding set, cap %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

func applySeccomp(prog []byte) error {
	if len(prog)%8 != 0 || len(prog) == 0 {
		return fmt.Errorf("malformed filter of %d bytes", len(prog))
	}
	n := len(prog) / 8
	filter := make([]unix.SockFilter, n)
	for i := range filter {
		b := prog[i*8:]
		filter[i] = unix.SockFilter{
			Code: *(*uint16)(unsafe.Pointer(&b[0])),
			Jt:   b[2],
			Jf:   b[3],
			K:    *(*uint32)(unsafe.Pointer(&b[4])),
		}
	}
	fprog := unix.SockFprog{Len: uint16(n), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return errno
	}
	runtime.KeepAlive(filter)
	return nil
}

// SystemDirs returns the host directories bound read-only into every
// sandbox (or recreated as the same symlinks).
func SystemDirs() []string { return append([]string(nil), systemDirs...) }

// Devices returns the device files of the sandbox's /dev, bound from the
// host's.
func Devices() []string { return append([]string(nil), devices...) }

// upperTmpfs mounts the throw-away change set's tmpfs (Config.UpperSize
// bytes) over dir, the change set's directory, and makes the overlay's
// upper and work directories in it: in this mount namespace only, so
// that the command's writes to the workspace are bounded and counted as
// memory of this sandbox whatever the host's memory file systems hold.
func upperTmpfs(dir, upper, work string, size int64) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=0700,size=%d", size)); err != nil {
		return fmt.Errorf("the change set's tmpfs at %s: %w", dir, err)
	}
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("the change set's tmpfs: %w", err)
		}
	}
	return nil
}

// upperState reads the throw-away change set's state from the statfs
// of the workspace's overlay (which reports its upper layer's file
// system): full (no block or no inode left) and the inodes in use.
func upperState(ws string) (full bool, inodes int64) {
	var sfs unix.Statfs_t
	if unix.Statfs(ws, &sfs) != nil {
		return false, 0
	}
	return sfs.Bavail == 0 || sfs.Ffree == 0, int64(sfs.Files - sfs.Ffree)
}
