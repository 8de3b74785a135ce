package cli

import (
	"os"

	"golang.org/x/sys/unix"
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
func (a *App) throwawayChangeSet(runtime string) (dir string, inMemory bool, err error) {
	if tmp, _ := a.Getenv("TMPDIR"); tmp == "" && runtime == "native" && memScratchUsable() {
		if dir, err := os.MkdirTemp(memScratch, "fluffy-changeset-"); err == nil {
			if userXattrs(dir) {
				return dir, true, nil
			}
			os.RemoveAll(dir)
		}
	}
	dir, err = os.MkdirTemp(a.tempDir(), "fluffy-changeset-")
	return dir, false, err
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
