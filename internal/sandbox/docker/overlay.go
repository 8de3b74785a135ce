package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// overlay is the host-side merged view of a workspace and its change set.
type overlay struct {
	merged, work string
}

// overlayOptions say how a workspace's overlay is mounted.
type overlayOptions struct {
	// readOnly mounts the change set as the upper of two lower layers
	// (lowerdir=cs:ws), with no upper and no work directory: the view
	// cannot be written, and the change set is never the upper
	// directory of this mount, so it may be the upper of another one
	// (the session's own sandbox) meanwhile.
	readOnly bool
	// userXattr reads the overlay's xattrs in the user.overlay.*
	// namespace (mount option userxattr): the change set was written by
	// the native runtime's overlays, which mark opaque directories
	// there.
	userXattr bool
}

// mountOverlay mounts lowerdir=ws, upperdir=cs (or with o.readOnly
// lowerdir=cs:ws) on a new directory under stateDir. The work directory
// sits next to the change set (overlay wants it on the same filesystem
// as the upper layer).
func mountOverlay(stateDir, owner, ws, cs string, o overlayOptions) (*overlay, error) {
	ws, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return nil, fmt.Errorf("%w: workspace: %w", sandbox.ErrInvalidSpec, err)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: workspace %s is not a directory", sandbox.ErrInvalidSpec, ws)
	}
	if err := os.MkdirAll(cs, 0o755); err != nil {
		return nil, fmt.Errorf("%w: change set: %w", sandbox.ErrSetup, err)
	}
	if cs, err = filepath.EvalSymlinks(cs); err != nil {
		return nil, fmt.Errorf("%w: change set: %w", sandbox.ErrSetup, err)
	}
	if within(cs, ws) || within(ws, cs) {
		return nil, fmt.Errorf("%w: the change set %s and the workspace %s must not contain each other", sandbox.ErrInvalidSpec, cs, ws)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: state directory: %w", sandbox.ErrSetup, err)
	}
	// The owner in the name lets GC find the mounts of a crashed fluffy
	// even when no container refers to them any more.
	merged, err := os.MkdirTemp(stateDir, "ws-"+strings.ReplaceAll(owner, ":", "-")+"-")
	if err != nil {
		return nil, fmt.Errorf("%w: mount point: %w", sandbox.ErrSetup, err)
	}
	var work string
	if !o.readOnly {
		if work, err = os.MkdirTemp(filepath.Dir(cs), ".fluffy-work-"); err != nil {
			os.Remove(merged)
			return nil, fmt.Errorf("%w: overlay work directory: %w", sandbox.ErrSetup, err)
		}
	}
	ov := &overlay{merged: merged, work: work}
	if err := os.WriteFile(merged+".work", []byte(work), 0o600); err != nil {
		ov.release()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	for _, p := range []string{ws, cs, work} {
		if strings.ContainsAny(p, ",:\\\n") {
			ov.release()
			return nil, fmt.Errorf("%w: %q: overlay paths may not contain , : \\ or newlines", sandbox.ErrInvalidSpec, p)
		}
	}
	data, flags := "lowerdir="+ws+",upperdir="+cs+",workdir="+work, uintptr(unix.MS_NOSUID|unix.MS_NODEV)
	if o.readOnly {
		data, flags = "lowerdir="+cs+":"+ws, flags|unix.MS_RDONLY
	}
	if o.userXattr {
		data += ",userxattr"
	}
	if err := unix.Mount("overlay", merged, "overlay", flags, data); err != nil {
		ov.release()
		if errors.Is(err, unix.EPERM) {
			return nil, &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "overlay", Required: true,
				Detail: "mounting the workspace overlay needs root in the engine's mount namespace: " + err.Error(),
				Fix:    "run fluffy as root on the engine's host, or run without a workspace (--no-workspace)"}}}
		}
		return nil, fmt.Errorf("%w: workspace overlay: %w", sandbox.ErrSetup, err)
	}
	return ov, nil
}

// release unmounts the overlay and removes its directories.
func (o *overlay) release() error {
	if o == nil {
		return nil
	}
	return releaseMount(o.merged, o.work)
}

func releaseMount(merged, work string) error {
	var errs []error
	if merged != "" {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("docker: unmounting %s: %w", merged, err))
		}
		if err := os.Remove(merged); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		_ = os.Remove(merged + ".work")
	}
	if work != "" && strings.Contains(filepath.Base(work), ".fluffy-work-") {
		// The kernel leaves an inner "work" directory with mode 0.
		_ = os.Chmod(filepath.Join(work, "work"), 0o700)
		if err := os.RemoveAll(work); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// cgroupPaths are the container's memory and pids cgroup directories on
// the host (v1 or v2).
type cgroupPaths struct {
	memory, pids string
	v2           bool
}

type cgEvents struct {
	oomKills, pidsMax int64
}

// findCgroups resolves the cgroups of pid from /proc/pid/cgroup.
func findCgroups(pid int) cgroupPaths {
	var p cgroupPaths
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return p
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			if p.memory == "" {
				p.memory, p.pids, p.v2 = "/sys/fs/cgroup"+f[2], "/sys/fs/cgroup"+f[2], true
			}
		default:
			for _, c := range strings.Split(f[1], ",") {
				switch c {
				case "memory":
					p.memory, p.v2 = "/sys/fs/cgroup/memory"+f[2], false
				case "pids":
					p.pids = "/sys/fs/cgroup/pids" + f[2]
				}
			}
		}
	}
	return p
}

// events reads the OOM-kill and pids-limit counters.
func (p cgroupPaths) events() cgEvents {
	var e cgEvents
	if p.memory != "" {
		if p.v2 {
			e.oomKills = keyed(filepath.Join(p.memory, "memory.events"), "oom_kill")
		} else {
			e.oomKills = keyed(filepath.Join(p.memory, "memory.oom_control"), "oom_kill")
		}
	}
	if p.pids != "" {
		e.pidsMax = keyed(filepath.Join(p.pids, "pids.events"), "max")
	}
	return e
}

func keyed(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// gcMounts releases the overlay mounts under stateDir whose owner process
// is gone (a fluffy that crashed between mounting and removing).
func gcMounts(stateDir string) ([]string, error) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "ws-") {
			continue
		}
		f := strings.SplitN(strings.TrimPrefix(name, "ws-"), "-", 3)
		if len(f) != 3 || ownerAlive(f[0]+":"+f[1]) {
			continue
		}
		merged := filepath.Join(stateDir, name)
		work, _ := os.ReadFile(merged + ".work")
		if err := releaseMount(merged, string(work)); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, merged)
	}
	return out, errors.Join(errs...)
}
