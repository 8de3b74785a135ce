package kernel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
)

// What a kernel killed in the middle of a sandboxed command leaves behind,
// and how the next kernel finds it:
//
//   - overlay work directories (".fluffy-work-*") beside the change sets'
//     upper directories under the data directory's changesets/. Only
//     kernels of this data directory create them there, and a kernel holds
//     the data directory's kernel.lock for its whole life: a kernel that
//     takes the lock knows that no other live kernel owns them, and it
//     removes only those older than its own start.
//   - per-execution cgroups, named "fluffy-sandbox-<pid>-<n>" after the
//     process that created them, in that process's own cgroups (v2, or
//     v1 memory and pids). One whose pid no longer runs is an orphan; a
//     live pid's are never touched, whoever it is. rmdir removes a cgroup
//     only once it is empty, so a live sandbox's cgroup cannot be removed
//     by mistake.
//
// The sandboxed processes themselves die with the kernel (the init is
// PID 1 of its namespace and has a parent-death signal), and their mounts
// live in that namespace; containers are the docker backend's business
// (docker.GC, run by every fluffy that uses a container runtime).

// LockFile is the file in the data directory a running kernel holds an
// exclusive lock on.
const LockFile = datadir.KernelLock

// workPrefix names the overlay work directories of sandboxes.
const workPrefix = ".fluffy-work-"

// cgroupPrefix names the native sandbox's per-execution cgroups.
const cgroupPrefix = "fluffy-sandbox-"

// Swept reports what SweepOrphans removed.
type Swept struct {
	WorkDirs []string `json:"work_dirs,omitempty"`
	Cgroups  []string `json:"cgroups,omitempty"`
	// Skipped says why part of the sweep did not run.
	Skipped string `json:"skipped,omitempty"`
}

// Count is the number of things removed.
func (s Swept) Count() int { return len(s.WorkDirs) + len(s.Cgroups) }

// SweepOptions configure SweepOrphans. DataDir is required.
type SweepOptions struct {
	DataDir datadir.Dir
	// OwnsDataDir says the caller holds the data directory's kernel lock
	// (no other live kernel uses its change sets).
	OwnsDataDir bool
	// Before: work directories modified at or after it are left alone
	// (default: now).
	Before time.Time
	// CgroupDirs are the directories holding per-execution cgroups;
	// nil means this process's own cgroups (/proc/self/cgroup).
	CgroupDirs []string
	// Alive reports whether a process runs; nil means kill(pid, 0).
	Alive func(pid int) bool
}

// SweepOrphans removes what dead kernels' sandboxes left behind (see the
// comment above LockFile). It removes what it can and reports the rest as
// one error; it never fails a start on its own.
func SweepOrphans(o SweepOptions) (Swept, error) {
	if o.Before.IsZero() {
		o.Before = time.Now()
	}
	if o.Alive == nil {
		o.Alive = alive
	}
	if o.CgroupDirs == nil {
		o.CgroupDirs = ownCgroupDirs()
	}
	var s Swept
	var errs []error
	if o.OwnsDataDir {
		dirs, err := filepath.Glob(filepath.Join(o.DataDir.Path(datadir.Changesets), "*", workPrefix+"*"))
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range dirs {
			fi, err := os.Lstat(d)
			if err != nil || !fi.IsDir() || !fi.ModTime().Before(o.Before) {
				continue
			}
			if err := removeTree(d); err != nil {
				errs = append(errs, err)
				continue
			}
			s.WorkDirs = append(s.WorkDirs, d)
		}
	} else {
		s.Skipped = "another kernel holds " + LockFile + ": its change sets' work directories are left alone"
	}
	for _, parent := range o.CgroupDirs {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			pid, ok := cgroupOwner(e.Name())
			if !ok || !e.IsDir() || pid == os.Getpid() || o.Alive(pid) {
				continue
			}
			d := filepath.Join(parent, e.Name())
			if err := removeCgroup(d); err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
				continue
			}
			s.Cgroups = append(s.Cgroups, d)
		}
	}
	return s, errors.Join(errs...)
}

// cgroupOwner parses "fluffy-sandbox-<pid>-<n>".
func cgroupOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return 0, false
	}
	p, n, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := strconv.Atoi(n); err != nil {
		return 0, false
	}
	return pid, true
}

// alive reports whether pid exists (EPERM: it exists, someone else's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ownCgroupDirs lists this process's cgroup directories: the v2 one and
// the v1 memory and pids ones, where the sandbox creates its cgroups.
func ownCgroupDirs() []string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "":
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", parts[2]), filepath.Join("/sys/fs/cgroup/unified", parts[2]))
		default:
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" || c == "pids" {
					dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, parts[2]))
				}
			}
		}
	}
	return dirs
}

// removeCgroup removes a dead kernel's cgroup. Processes still in it
// (sandboxed commands that outlived their init) are killed first: they
// belong to no live kernel.
func removeCgroup(d string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if b, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, perr := strconv.Atoi(f); perr == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return err
}

// removeTree removes a directory an overlay used as its work directory
// (the kernel leaves its inner "work" directory with mode 0).
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// lockDataDir takes the data directory's kernel lock without waiting; it
// returns nil when another process holds it.
func lockDataDir(d datadir.Dir) (*lockfile.Lock, error) {
	l, err := lockfile.Acquire(context.Background(), d.Path(LockFile), lockfile.Options{})
	if errors.Is(err, lockfile.ErrBusy) {
		return nil, nil
	}
	return l, err
}
