package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

const (
	userNSFix   = "enable unprivileged user namespaces: sysctl -w user.max_user_namespaces=15000; on Debian kernels before 6.x also sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 or add an AppArmor profile allowing userns for fluffy"
	landlockFix = "boot a kernel >= 5.13 with CONFIG_SECURITY_LANDLOCK=y and landlock in the LSM list (lsm=landlock,... on the kernel command line)"
	seccompFix  = "boot a kernel with CONFIG_SECCOMP_FILTER=y"
	overlayFix  = "use a kernel >= 5.11 (overlayfs mounts inside user namespaces), or put the workspace and change set on a file system overlayfs accepts as layers"
	cgroupFix   = "run as root, or delegate a cgroup v2 subtree with the memory and pids controllers to this user (systemd: run fluffy under 'systemd-run --user --scope -p Delegate=yes')"
)

func syscallAccessW(dir string) error { return unix.Access(dir, unix.W_OK) }

// quickFacilities detects what the host offers without starting a
// process: cheap enough for every run. Overlay support inside a user
// namespace can only be known by trying; it is assumed here and reported
// by the run that fails (see Detect for the full probe).
func quickFacilities(cgl cgroupLayout) []sandbox.Facility {
	return []sandbox.Facility{
		userNSFacility(),
		landlockFacility(),
		seccompFacility(),
		{Name: "overlay-userns", Available: true, Required: true, Detail: "assumed (kernel >= 5.11); run 'fluffy doctor' to test it"},
		cgroupFacility(cgl),
	}
}

func readSysctl(name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/")))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func userNSFacility() sandbox.Facility {
	f := sandbox.Facility{Name: "userns", Required: true, Fix: userNSFix}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		f.Detail = "the kernel has no user namespaces (CONFIG_USER_NS)"
		return f
	}
	if n, ok := readSysctl("user.max_user_namespaces"); ok && n == 0 {
		f.Detail = "user.max_user_namespaces is 0"
		return f
	}
	if os.Getuid() != 0 {
		if n, ok := readSysctl("kernel.unprivileged_userns_clone"); ok && n == 0 {
			f.Detail = "kernel.unprivileged_userns_clone is 0"
			return f
		}
		if n, ok := readSysctl("kernel.apparmor_restrict_unprivileged_userns"); ok && n == 1 {
			f.Detail = "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"
			return f
		}
	}
	f.Available, f.Fix = true, ""
	f.Detail = "user, mount, pid, net, ipc, uts and cgroup namespaces"
	return f
}

func landlockFacility() sandbox.Facility {
	f := sandbox.Facility{Name: "landlock", Required: true, Fix: landlockFix}
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		if err == nil {
			err = errors.New("ABI 0")
		}
		f.Detail = "landlock unavailable: " + err.Error()
		return f
	}
	f.Available, f.Fix, f.Version = true, "", abi
	f.Detail = fmt.Sprintf("ABI %d", abi)
	switch {
	case abi < 4:
		f.Detail += " (file system only; no TCP rules, no IPC scoping)"
	case abi < 6:
		f.Detail += " (file system and TCP; no IPC scoping)"
	default:
		f.Detail += " (file system, TCP, signal and abstract-socket scoping)"
	}
	return f
}

func seccompFacility() sandbox.Facility {
	f := sandbox.Facility{Name: "seccomp", Required: true, Fix: seccompFix}
	// SECCOMP_GET_ACTION_AVAIL answers without changing anything.
	action := uint32(0x80000000) // SECCOMP_RET_KILL_PROCESS
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, 2 /* SECCOMP_GET_ACTION_AVAIL */, 0, uintptr(unsafePointer(&action)))
	if errno != 0 {
		f.Detail = "seccomp filters unavailable: " + errno.Error()
		return f
	}
	f.Available, f.Fix = true, ""
	f.Detail = "filter mode with SECCOMP_RET_KILL_PROCESS"
	return f
}

func cgroupFacility(cgl cgroupLayout) sandbox.Facility {
	f := sandbox.Facility{Name: "cgroup", Available: cgl.available, Detail: cgl.String()}
	if !cgl.available {
		f.Fix = cgroupFix
		f.Detail += "; falling back to RLIMIT_AS and RLIMIT_NPROC"
	}
	return f
}

// DetectOptions configure Detect.
type DetectOptions struct {
	// Self is the fluffy binary; required for the overlay probe.
	Self string
	// TempDir holds the probe's workspace and change set; empty means
	// os.TempDir().
	TempDir string
}

// Detect reports every facility the native sandbox uses, as data, for
// 'fluffy doctor': user namespaces, the landlock ABI, seccomp, overlayfs
// inside a user namespace (probed by starting a real sandbox init that
// mounts an overlay and exits) and cgroups.
func Detect(ctx context.Context, opts DetectOptions) []sandbox.Facility {
	facs := quickFacilities(findCgroups())
	ov := sandbox.Facility{Name: "overlay-userns", Required: true, Fix: overlayFix}
	if err := probeOverlay(ctx, opts); err != nil {
		ov.Detail = err.Error()
	} else {
		ov.Available, ov.Fix = true, ""
		ov.Detail = "overlayfs mounts inside the sandbox's user namespace"
	}
	for i := range facs {
		if facs[i].Name == ov.Name {
			facs[i] = ov
		}
	}
	return append(facs, initFacility(opts.Self))
}

// initFacility says which program runs as the sandbox init: the small
// binary beside fluffy, or (slower to start, same protection) fluffy
// itself.
func initFacility(self string) sandbox.Facility {
	f := sandbox.Facility{Name: "sandbox-init"}
	if self == "" {
		f.Detail = "not checked: no fluffy binary given"
		return f
	}
	rt, err := New(Options{Self: self})
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	how := "; started by vfork with its namespaces (nothing of fluffy is copied)"
	if !vforkSupported {
		how = "; started by os/exec (a full fork; stage 1 from callers with a big heap)"
	}
	if p := rt.InitPath(); p != self {
		f.Available = true
		f.Detail = "the small init " + p + how
		return f
	}
	f.Detail = "fluffy re-executes itself as the sandbox init (slower to start, same protection)" + how
	f.Fix = "install " + InitBinaryName + " beside fluffy (make install, or go install ./cmd/fluffy-sandbox-init)"
	return f
}

func probeOverlay(ctx context.Context, opts DetectOptions) error {
	if opts.Self == "" {
		return errors.New("not probed: no fluffy binary given")
	}
	dir, err := os.MkdirTemp(opts.TempDir, "fluffy-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ws, cs := filepath.Join(dir, "ws"), filepath.Join(dir, "cs")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	rt, err := New(Options{Self: opts.Self, Facilities: func() []sandbox.Facility {
		return []sandbox.Facility{{Name: "userns", Available: true}, {Name: "overlay-userns", Available: true}}
	}, AllowDegraded: true})
	if err != nil {
		return err
	}
	res, err := rt.Run(ctx, sandbox.Spec{Argv: []string{"/bin/sh", "-c", "echo ok > probe"}, Workspace: ws, ChangeSet: cs})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("writing through the overlay failed: %s", strings.TrimSpace(string(res.Stderr)))
	}
	if _, err := os.Stat(filepath.Join(cs, "probe")); err != nil {
		return fmt.Errorf("the write did not reach the change set: %w", err)
	}
	return nil
}

func unsafePointer(p *uint32) unsafe.Pointer { return unsafe.Pointer(p) }
