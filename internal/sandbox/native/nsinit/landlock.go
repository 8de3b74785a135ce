package nsinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock access rights (linux/landlock.h).
const (
	llFSExecute = 1 << iota
	llFSWriteFile
	llFSReadFile
	llFSReadDir
	llFSRemoveDir
	llFSRemoveFile
	llFSMakeChar
	llFSMakeDir
	llFSMakeReg
	llFSMakeSock
	llFSMakeFifo
	llFSMakeBlock
	llFSMakeSym
	llFSRefer
	llFSTruncate
	llFSIoctlDev
	llFSResolveUnix

	llFSRead = llFSExecute | llFSReadFile | llFSReadDir
	// llFSRefer lets a file move (rename, link) between directories of
	// the writable trees; landlock still refuses a move that would give
	// the file rights it lacks where it came from, so nothing leaves a
	// read-only tree. Without it such a rename fails with EXDEV, which
	// mv survives by copying but rustc does not.
	llFSWrite     = llFSWriteFile | llFSRemoveDir | llFSRemoveFile | llFSMakeChar | llFSMakeDir | llFSMakeReg | llFSMakeSock | llFSMakeFifo | llFSMakeBlock | llFSMakeSym | llFSTruncate | llFSRefer
	llFSReadWrite = llFSRead | llFSWrite
	llFSFileOnly  = llFSExecute | llFSWriteFile | llFSTruncate | llFSReadFile

	llRulePathBeneath = 1
)

// landlockABI says what a Landlock ABI version can restrict: file system
// rights, network rights (TCP, then UDP) and scopes (abstract unix
// sockets, signals).
func landlockABI(v int) (fs, net, scoped uint64) {
	switch {
	case v >= 10:
		return 1<<17 - 1, 1<<4 - 1, 1<<2 - 1
	case v == 9:
		return 1<<17 - 1, 1<<2 - 1, 1<<2 - 1
	case v >= 6:
		return 1<<16 - 1, 1<<2 - 1, 1<<2 - 1
	case v == 5:
		return 1<<16 - 1, 1<<2 - 1, 0
	case v == 4:
		return 1<<15 - 1, 1<<2 - 1, 0
	case v == 3:
		return 1<<15 - 1, 0, 0
	case v == 2:
		return 1<<14 - 1, 0, 0
	case v == 1:
		return 1<<13 - 1, 0, 0
	}
	return 0, 0, 0
}

// llRulesetAttr is struct landlock_ruleset_attr up to the scopes (ABI 6);
// older kernels accept it as long as the fields they do not know are 0.
type llRulesetAttr struct {
	handledFS  uint64
	handledNet uint64
	scoped     uint64
}

// llPathBeneath is struct landlock_path_beneath_attr (packed).
type llPathBeneath struct {
	allowed uint64
	fd      int32
}

// applyLandlock restricts this thread (and so the command, which is
// forked from it) with every access right the kernel's ABI knows: read
// and execute everywhere in the (minimal) root; write only to /tmp, the
// workspace overlay (whose writes land in the change set), the writable
// extra mounts and the harmless devices; no TCP/UDP bind or connect when
// the network is none; no signals or abstract unix sockets beyond the
// sandbox. It is applied to this thread only (no_new_privs is already
// set on it): the init's other threads never run sandboxed code, and
// synchronising every thread (what go-landlock does) stops the world.
func applyLandlock(cfg *Config) error {
	rw := []string{"/tmp"}
	if cfg.Workspace != "" && !cfg.WorkspaceRO && !cfg.OverlayRO {
		rw = append(rw, cfg.Workspace)
	}
	for _, m := range cfg.Mounts {
		if m.Writable {
			rw = append(rw, m.Target)
		}
	}
	var devs []string
	for _, d := range devices {
		devs = append(devs, "/dev/"+d)
	}
	return applyLandlockPaths(cfg, rw, devs)
}

// applyLandlockPaths restricts this thread to reading everywhere and
// writing to rw (directories or files) and to the files in rwFiles.
func applyLandlockPaths(cfg *Config, rw, rwFiles []string) error {
	fs, net, scoped := landlockABI(cfg.Landlock)
	if fs == 0 {
		return fmt.Errorf("unknown landlock ABI %d", cfg.Landlock)
	}
	if !cfg.LandlockNet {
		net = 0
	}
	attr := llRulesetAttr{handledFS: fs, handledNet: net, scoped: scoped}
	size := unsafe.Sizeof(attr)
	if scoped == 0 {
		size = 16
		if net == 0 {
			size = 8
		}
	}
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(r)
	defer unix.Close(ruleset)
	add := func(path string, access uint64) error {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("landlock rule for %s: %w", path, err)
		}
		defer unix.Close(fd)
		rule := llPathBeneath{allowed: access & fs, fd: int32(fd)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), llRulePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock rule for %s: %w", path, errno)
		}
		return nil
	}
	if err := add("/", llFSRead); err != nil {
		return err
	}
	for _, p := range rw {
		access := uint64(llFSReadWrite)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFSFileOnly
		}
		if err := add(p, access); err != nil {
			return err
		}
	}
	for _, f := range rwFiles {
		if err := add(f, llFSReadWrite&llFSFileOnly); err != nil {
			return err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// LandlockABI returns the file system, network and scope access rights
// that landlock ABI v handles (the direct start builds the same ruleset).
func LandlockABI(v int) (fs, net, scoped uint64) { return landlockABI(v) }

// Access rights the direct start's ruleset grants, as applyLandlock's.
const (
	LandlockRead      = llFSRead
	LandlockReadWrite = llFSReadWrite
	LandlockFileOnly  = llFSFileOnly
)
