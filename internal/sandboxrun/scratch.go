package sandboxrun

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// memScratch is the memory file system a throw-away change set goes to
// when it can; minMemScratch is the smallest one worth using (a
// container's default /dev/shm is 64 MB: a build would fill it).
const (
	memScratch    = "/dev/shm"
	minMemScratch = 1 << 30
)

// throwawayChangeSet makes the directory of a throw-away change set (the
// one `sandbox run` uses without --changeset, removed after the run) and
// reports whether it is in memory. Data that is deleted milliseconds
// after it is written has no business on a disk: on ext4 each run's
// directories (the change set's and the overlay's work directories, made
// and removed again) are journal commits, inode allocations that ext4
// spreads away from the ones just freed, and work the next run's audit
// fsync waits for (about 1 ms a run; docs/sandbox.md). So the native
// runtime gets a directory in /dev/shm when TMPDIR is unset or empty (a
// TMPDIR is the user's choice), /dev/shm is a tmpfs of at least
// 1 GiB that this user may write, and it keeps user extended attributes
// (which the overlay in a user namespace stores its whiteouts in: tmpfs
// has them from Linux 6.6, and idmapped mounts from 6.3). What the
// command writes there is memory, charged to the sandbox's memory
// cgroup like its /tmp; --changeset DIR keeps large outputs on disk.
func throwawayChangeSet(u *userenv.Env, runtime string) (dir string, inMemory bool, err error) {
	if tmp, _ := u.Getenv("TMPDIR"); tmp == "" && runtime == "native" && memScratchUsable() {
		if dir, err := os.MkdirTemp(memScratch, scratchPrefix()); err == nil {
			if userXattrs(dir) {
				return dir, true, nil
			}
			os.RemoveAll(dir)
		}
	}
	dir, err = os.MkdirTemp(u.TempDir(), scratchPrefix())
	return dir, false, err
}

// scratchPrefix names a throw-away change set after the process that
// made it (fluffy-changeset-PID-), which sweepScratch reads.
func scratchPrefix() string { return "fluffy-changeset-" + strconv.Itoa(os.Getpid()) + "-" }

// sweepScratch removes from memScratch the throw-away change sets of
// fluffy processes that are gone (killed with SIGKILL: a sandbox
// server's change set made ahead for its next run, a run's own) and
// returns how many. Only this user's, and only where the process named
// is not running.
func sweepScratch() (int, error) {
	ents, err := os.ReadDir(memScratch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "fluffy-changeset-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // running (or another user's process of that pid)
		}
		if err := removeScratch(filepath.Join(memScratch, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// memScratchUsable says whether memScratch is a tmpfs, large enough,
// that this process may create directories in.
func memScratchUsable() bool {
	var st unix.Statfs_t
	if unix.Statfs(memScratch, &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	if uint64(st.Blocks)*uint64(st.Bsize) < minMemScratch {
		return false
	}
	return unix.Access(memScratch, unix.W_OK|unix.X_OK) == nil
}

// userXattrs says whether dir's file system stores user extended
// attributes (tries one on dir itself).
func userXattrs(dir string) bool {
	const name = "user.fluffy-probe"
	if err := unix.Setxattr(dir, name, []byte{1}, 0); err != nil {
		return false
	}
	_ = unix.Removexattr(dir, name)
	return true
}

// removeScratch removes a throw-away change set, whose overlay work
// directory may hold a directory of mode 0 (the kernel's).
func removeScratch(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
