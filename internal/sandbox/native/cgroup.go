package native

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupLayout says where this process may create child cgroups for
// memory and pids: one cgroup v2 directory, or the v1 memory and pids
// directories. The zero value means "no usable cgroup".
type cgroupLayout struct {
	v2        string
	v1Memory  string
	v1Pids    string
	reason    string // why none is usable, when so
	available bool
	// v1Threads says this process may move its own threads back into
	// v1Memory and v1Pids (their "tasks" files are writable): a thread
	// can then visit a sandbox's cgroup to clone the init inside it
	// (cgroup.startInside).
	v1Threads bool
	// v1MemSw says the v1 memory controller accounts swap
	// (memory.memsw.limit_in_bytes exists).
	v1MemSw bool
}

func (l cgroupLayout) String() string {
	switch {
	case !l.available:
		return l.reason
	case l.v2 != "":
		return "cgroup v2 memory+pids under " + l.v2 + " (the init is cloned into it)"
	case l.v1Threads:
		return "cgroup v1 memory+pids under " + l.v1Memory + " and " + l.v1Pids + " (the init is cloned inside it)"
	default:
		return "cgroup v1 memory+pids under " + l.v1Memory + " and " + l.v1Pids + " (the init is moved in after its start: a few ms more per run)"
	}
}

// findCgroups reads /proc/self/cgroup and checks that a child cgroup can
// be created where this process lives (write access to the parent).
func findCgroups() cgroupLayout {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cgroupLayout{reason: "cannot read /proc/self/cgroup: " + err.Error()}
	}
	defer f.Close()
	paths := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			paths["unified"] = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	writable := func(dir string) bool {
		return syscallAccessW(dir) == nil
	}
	// Pure v2, or a hybrid host whose unified tree has the controllers.
	for _, base := range []string{cgroupRoot, cgroupRoot + "/unified"} {
		p, ok := paths["unified"]
		if !ok {
			break
		}
		ctl, err := os.ReadFile(filepath.Join(base, p, "cgroup.subtree_control"))
		if err != nil {
			continue
		}
		c := " " + strings.TrimSpace(string(ctl)) + " "
		dir := filepath.Join(base, p)
		if strings.Contains(c, " memory ") && strings.Contains(c, " pids ") && writable(dir) {
			return cgroupLayout{v2: dir, available: true}
		}
	}
	mem, okm := paths["memory"]
	pids, okp := paths["pids"]
	if okm && okp {
		md, pd := filepath.Join(cgroupRoot, "memory", mem), filepath.Join(cgroupRoot, "pids", pids)
		if _, err := os.Stat(filepath.Join(md, "memory.limit_in_bytes")); err == nil {
			if writable(md) && writable(pd) {
				threads := writable(md+"/tasks") && writable(pd+"/tasks")
				_, err := os.Stat(filepath.Join(md, "memory.memsw.limit_in_bytes"))
				return cgroupLayout{v1Memory: md, v1Pids: pd, available: true, v1Threads: threads, v1MemSw: err == nil}
			}
			return cgroupLayout{reason: fmt.Sprintf("cgroup v1 directories %s and %s are not writable by this user (no delegation)", md, pd)}
		}
	}
	return cgroupLayout{reason: "no cgroup v2 delegation with memory and pids controllers, and no writable cgroup v1 memory and pids hierarchies"}
}

var cgroupSeq atomic.Int64

// cgroup is one execution's cgroup (one v2 directory or two v1 ones).
type cgroup struct {
	dirs []string
	v2   bool
}

func newCgroup(l cgroupLayout, memory int64, pids int) (*cgroup, error) {
	name := fmt.Sprintf("fluffy-sandbox-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	cg := &cgroup{}
	if l.v2 != "" {
		cg.v2 = true
		cg.dirs = []string{filepath.Join(l.v2, name)}
	} else {
		cg.dirs = []string{filepath.Join(l.v1Memory, name), filepath.Join(l.v1Pids, name)}
	}
	for _, d := range cg.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	if err := cg.setLimits(l, memory, pids); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

// setLimits writes the memory (with swap: none beyond it) and pids
// limits; 0 leaves one as it is (a new cgroup: no limit).
func (c *cgroup) setLimits(l cgroupLayout, memory int64, pids int) error {
	var writes [][2]string
	if c.v2 {
		d := c.dirs[0]
		if memory > 0 {
			writes = append(writes, [2]string{d + "/memory.max", strconv.FormatInt(memory, 10)}, [2]string{d + "/memory.swap.max", "0"})
		}
		if pids > 0 {
			writes = append(writes, [2]string{d + "/pids.max", strconv.Itoa(pids)})
		}
	} else {
		if memory > 0 {
			writes = append(writes, [2]string{c.dirs[0] + "/memory.limit_in_bytes", strconv.FormatInt(memory, 10)})
			if l.v1MemSw {
				writes = append(writes, [2]string{c.dirs[0] + "/memory.memsw.limit_in_bytes", strconv.FormatInt(memory, 10)})
			}
		}
		if pids > 0 {
			writes = append(writes, [2]string{c.dirs[1] + "/pids.max", strconv.Itoa(pids)})
		}
	}
	for _, w := range writes {
		if err := cgWrite(w[0], w[1]); err != nil {
			if strings.HasSuffix(w[0], "swap.max") && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// prime moves this process into the memory cgroup it is already in: a
// no-op, except that the kernel switches its cgroup migration lock into
// writer mode, which waits for an RCU grace period (milliseconds on a
// busy host). Done while the init is being created, it spares the real
// move of the init (add) that wait: the lock stays in writer mode for a
// grace period after each writer. Errors do not matter (add reports).
func (c *cgroup) prime(l cgroupLayout) {
	if c.v2 || l.v1Memory == "" {
		return
	}
	_ = os.WriteFile(l.v1Memory+"/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0)
}

// startInside starts the init from an OS thread that is inside the
// cgroup (v1) for the moment of the clone, so the init is born in it:
// nothing is migrated. Moving a process (cgroup.procs, as add does) takes
// the kernel's global threadgroup lock in writer mode, which waits for an
// RCU grace period (6-15 ms on this 2-core VM, HZ=250); writing "0" to a
// v1 "tasks" file moves only the writing thread, which the kernel does
// without that lock (kernels >= 5.17; older ones take it and are merely
// as slow as add). The thread then moves back to this process's own
// cgroups (see startOnThread for the rest). If it cannot move back, it
// is not given back to the Go scheduler at all (it would run other
// goroutines inside the sandbox's limits): it exits once the run is over.
//
// entered reports whether the thread reached the cgroup; when it did
// not, nothing was started and the caller may fall back to add.
func (c *cgroup) startInside(l cgroupLayout, start func() error, reusable func() bool, ended <-chan struct{}) (entered bool, err error) {
	enter, leave := c.threadMoves(l)
	return startOnThread(enter, leave, nil, start, reusable, ended)
}

// threadMoves returns startInside's moves of the calling thread into
// the cgroup and back to this process's own.
func (c *cgroup) threadMoves(l cgroupLayout) (enter, leave func() error) {
	return func() error { return moveThread(c.dirs...) }, func() error { return moveThread(l.v1Memory, l.v1Pids) }
}

// startOnThread runs start on an OS thread locked to a goroutine of its
// own, after enter (when not nil) and before leave: the init's
// parent-death signal follows the thread that cloned it, so that thread
// stays, locked (no other goroutine can end it), until ended is closed.
// leaveAfter (when not nil) also undoes enter, after start's outcome is
// returned: off the caller's path (a network namespace's setns back
// takes ~0.4 ms), for what nothing of the run waits for (a cgroup the
// run removes at its end must be left before: leave). The thread goes
// back to the Go scheduler only if both succeeded and reusable (when
// not nil) says so; otherwise it exits with the goroutine (Go ends a
// thread whose goroutine exits while locked). entered reports whether
// enter succeeded (start ran).
func startOnThread(enter, leave, leaveAfter func() error, start func() error, reusable func() bool, ended <-chan struct{}) (entered bool, err error) {
	type result struct {
		entered bool
		err     error
	}
	ch := make(chan result, 1)
	startOnThreadThen(enter, leave, leaveAfter, start, reusable, ended, func(entered bool, err error) { ch <- result{entered, err} })
	r := <-ch
	return r.entered, r.err
}

// startOnThreadThen is startOnThread returning at once: done receives
// the outcome, called on the locked thread (one goroutine hand-over
// fewer on the way to whoever waits for it).
func startOnThreadThen(enter, leave, leaveAfter func() error, start func() error, reusable func() bool, ended <-chan struct{}, done func(entered bool, err error)) {
	go func() {
		runtime.LockOSThread()
		if enter != nil {
			if err := enter(); err != nil {
				done(false, err)
				return
			}
		}
		err := start()
		ok := leave == nil || leave() == nil
		ok = ok && (reusable == nil || reusable())
		done(true, err)
		ok = (leaveAfter == nil || leaveAfter() == nil) && ok
		if err == nil {
			<-ended
		}
		if ok {
			runtime.UnlockOSThread()
		}
	}()
}

// moveThread moves the calling thread into each v1 cgroup directory.
func moveThread(dirs ...string) error {
	for _, d := range dirs {
		fd, err := unix.Open(d+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroup: %s/tasks: %w", d, err)
		}
		_, err = unix.Write(fd, []byte("0"))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("cgroup: move a thread into %s: %w", d, err)
		}
	}
	return nil
}

func (c *cgroup) add(pid int) error {
	for _, d := range c.dirs {
		if err := cgWrite(d+"/cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: join %s: %w", d, err)
		}
	}
	return nil
}

// events returns how many OOM kills happened and how many forks the pids
// limit refused.
func (c *cgroup) events() (oomKills, pidsMax int) {
	if c.v2 {
		oomKills = keyedValue(c.dirs[0]+"/memory.events", "oom_kill")
		pidsMax = keyedValue(c.dirs[0]+"/pids.events", "max")
		return
	}
	oom := keyedValues(c.dirs[0]+"/memory.oom_control", "oom_kill", "under_oom")
	oomKills = oom[0]
	if oomKills == 0 && oom[1] > 0 {
		// Kernels before 4.13 have no oom_kill count: the limit being
		// reached is the best sign.
		oomKills = 1
	}
	pidsMax = keyedValue(c.dirs[1]+"/pids.events", "max")
	return
}

func keyedValue(file, key string) int { return keyedValues(file, key)[0] }

// keyedValues reads the values of keys in a flat keyed file ("key
// value" lines), 0 for a key (or a file) that is missing.
func keyedValues(file string, keys ...string) []int {
	vals := make([]int, len(keys))
	b, err := cgRead(file)
	if err != nil {
		return vals
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, key := range keys {
			if k == key {
				vals[i], _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	return vals
}

// remove deletes the cgroup directories, waiting briefly for the kernel to
// finish tearing down the processes that were in them.
func (c *cgroup) remove() error {
	var errs []error
	for _, d := range c.dirs {
		var err error
		for i := 0; i < 50; i++ {
			err = unix.Rmdir(d)
			if err == nil || err == unix.ENOENT {
				err = nil
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: d, Err: err})
		}
	}
	return errors.Join(errs...)
}

// cgWrite writes a cgroup control file with plain system calls: an
// os.File would register the (pollable) kernfs file with Go's poller and
// unregister it again, two more system calls per file at every run.
func cgWrite(path, data string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(data)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// cgRead reads a (small) cgroup control file, as cgWrite writes one.
func cgRead(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// sweep removes the cgroups of sandboxes whose fluffy process is gone
// (killed with SIGKILL, its sandboxes died with it but their cgroup
// directories stayed): those named fluffy-sandbox-PID-N in this layout's
// directories whose PID is not a live process. A cgroup that still has
// processes, or one of a live fluffy, is left alone (rmdir refuses a
// populated cgroup anyway). It returns how many cgroups it removed.
func (l cgroupLayout) sweep() (int, error) {
	if !l.available {
		return 0, nil
	}
	parents := []string{l.v2}
	if l.v2 == "" {
		parents = []string{l.v1Memory, l.v1Pids}
	}
	removed := 0
	var errs []error
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			pid, ok := sandboxCgroupPid(e.Name())
			if !ok || !e.IsDir() || pidAlive(pid) {
				continue
			}
			switch err := unix.Rmdir(filepath.Join(parent, e.Name())); {
			case err == nil:
				removed++
			case errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOENT):
				// Still populated, or swept by another fluffy meanwhile.
			default:
				errs = append(errs, fmt.Errorf("remove the stale cgroup %s: %w", filepath.Join(parent, e.Name()), err))
			}
		}
	}
	return removed, errors.Join(errs...)
}

// sandboxCgroupPid returns PID of a cgroup name fluffy-sandbox-PID-N.
func sandboxCgroupPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "fluffy-sandbox-")
	if !ok {
		return 0, false
	}
	p, n, ok := strings.Cut(rest, "-")
	pid, err1 := strconv.Atoi(p)
	_, err2 := strconv.Atoi(n)
	return pid, ok && err1 == nil && err2 == nil && pid > 0
}

// pidAlive reports whether a process with this pid exists (in any state
// but gone); a recycled pid only makes sweep leave a directory for later.
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
