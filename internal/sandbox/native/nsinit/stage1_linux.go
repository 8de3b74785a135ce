package nsinit

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Stage1Arg0 is argv[0] of the small init binary when fluffy starts it as
// stage 1: without namespaces, so that fluffy's clone is a cheap vfork,
// whereas a clone with CLONE_NEWUSER is a full fork that copies the page
// tables of the large fluffy process. Stage 1 then creates the namespaced
// init (Main) itself, from its own small address space, writes its id
// maps, and stays as its parent until it ends (Stage1Main).
const Stage1Arg0 = "fluffy-sandbox-stage1"

// Stage1Stage is the Status.Stage stage 1 reports when creating the
// namespaces failed with EPERM, EINVAL or ENOSPC (user namespaces not
// available to this user); other clone failures report "clone".
const Stage1Stage = "userns"

// IsStage1 reports whether this process was started as stage 1.
func IsStage1() bool { return len(os.Args) > 0 && os.Args[0] == Stage1Arg0 }

// Stage1Main runs stage 1. Its arguments are the host uid and gid that
// uid and gid 0 of the sandbox map to, "1" when the caller is root
// (supplementary groups are then dropped) or "0", and the descriptors
// from 3 to ProxyFD it was given, as a string of '1' (given) and '0'. Those
// descriptors and 0 to 2 are handed unchanged to the init, which is
// the binary on fd 6 started as Arg0 in new user, mount, PID, network,
// IPC, UTS and cgroup namespaces, as uid 0 of its user namespace, in a
// session of its own, and killed when this process dies (fluffy's start
// of this process sets the same parent-death signal: if fluffy dies,
// both die). When fd 5 (the idmapped-trees socket) is open, the init's
// user namespace is sent on it, so fluffy can idmap mounts for it.
// SIGTERM makes stage 1 kill the init (which takes its PID namespace
// with it) and end once the init is gone: fluffy stops a sandbox that way
// so that when stage 1 has been reaped nothing of the sandbox is left.
// Stage 1 exits with the init's status.
func Stage1Main() int {
	// The init's parent-death signal follows the thread that clones it:
	// this one, which never ends before the process.
	runtime.LockOSThread()
	fail := func(stage string, err error) int {
		writeStatus(os.NewFile(4, "status"), &Status{Stage: stage, Error: err.Error()})
		return 125
	}
	if len(os.Args) != 5 || len(os.Args[4]) != ProxyFD-2 {
		return fail("stage1", fmt.Errorf("stage 1 wants 4 arguments, has %d", len(os.Args)-1))
	}
	uid, err1 := strconv.Atoi(os.Args[1])
	gid, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return fail("stage1", fmt.Errorf("stage 1: bad ids %q %q", os.Args[1], os.Args[2]))
	}
	root := os.Args[3] == "1"
	// Installed before the init exists: a SIGTERM before it would end
	// this process while there is nothing to kill yet.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	files := make([]uintptr, ProxyFD+1)
	for fd := range files {
		if fd < 3 || os.Args[4][fd-3] == '1' {
			files[fd] = uintptr(fd)
		} else {
			files[fd] = ^uintptr(0) // closed in the init
		}
	}
	pid, err := syscall.ForkExec("/proc/self/fd/6", []string{Arg0}, &syscall.ProcAttr{
		Env:   []string{"GOMAXPROCS=1"},
		Files: files,
		Sys: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
				syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			// Become uid 0 of the new namespace explicitly: without it a
			// root caller's child keeps host uid 0 credentials.
			Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: !root},
			// Root can drop its supplementary groups; others cannot.
			GidMappingsEnableSetgroups: root,
			Setsid:                     true,
			Pdeathsig:                  syscall.SIGKILL,
		},
	})
	if err != nil {
		stage := "clone"
		if err == syscall.EPERM || err == syscall.EINVAL || err == syscall.ENOSPC {
			stage = Stage1Stage
		}
		return fail(stage, fmt.Errorf("creating the namespaces: %w", err))
	}
	if files[5] == 5 {
		if err := sendUserNS(5, pid); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			// The init reports nothing once killed: this is the report.
			return fail("stage1", fmt.Errorf("send the user namespace: %w", err))
		}
	}
	// Only the init holds the pipes and sockets now: fluffy sees their
	// ends when it does.
	for fd := 0; fd <= ProxyFD; fd++ {
		if fd != 2 && files[fd] == uintptr(fd) {
			unix.Close(fd)
		}
	}
	// The init's pid is killed only while it is certain to be the init:
	// before it is reaped (a zombie keeps its pid), never after.
	var mu sync.Mutex
	reaped := false
	go func() {
		<-term
		mu.Lock()
		defer mu.Unlock()
		if !reaped {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}()
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 125
		}
		break
	}
	mu.Lock()
	reaped = true
	mu.Unlock()
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 125
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// sendUserNS sends the user namespace of pid over the socket sock.
func sendUserNS(sock, pid int) error {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	return unix.Sendmsg(sock, []byte{'U'}, unix.UnixRights(ns), nil, 0)
}
