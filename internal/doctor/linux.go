package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func kernelRelease() (string, int, int) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown", 0, 0
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return rel + " " + unix.ByteSliceToString(u.Machine[:]), major, minor
}

func atLeast(major, minor, wantMajor, wantMinor int) bool {
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

func checkKernel() Check {
	rel, major, minor := kernelRelease()
	c := Check{Name: "kernel", Detail: "Linux " + rel, Required: true}
	switch {
	case !atLeast(major, minor, 5, 11):
		c.Status = Warn
		c.Detail += ": overlayfs inside a user namespace needs 5.11, landlock 5.13"
		c.Fix = "upgrade the kernel (Debian 12 ships 6.1)"
	default:
		c.Status = OK
	}
	return c
}

// probe re-executes fluffy in new user and mount namespaces to run one of
// the probes of ProbeMain, returning its error output.
func probe(ctx context.Context, opts Options, name string, args ...string) error {
	if opts.Self == "" {
		return errors.New("cannot locate the fluffy binary to probe with")
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, opts.Self, append([]string{ProbeCommand, name}, args...)...)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		// As root, the child would otherwise keep host uid 0 outside
		// the map; be the mapped root explicitly.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			return err
		}
		return fmt.Errorf("%w: %s", err, msg)
	}
	return nil
}

func userNSHint() string {
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return "AppArmor restricts unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return "sysctl -w kernel.unprivileged_userns_clone=1"
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return "sysctl -w user.max_user_namespaces=15000"
	}
	return "enable user namespaces (CONFIG_USER_NS) or use --set sandbox.runtime=docker"
}

func checkUserNS(ctx context.Context, opts Options, required bool) Check {
	c := Check{Name: "user namespaces", Required: required}
	if err := probe(ctx, opts, "userns"); err != nil {
		c.Status, c.Detail, c.Fix = Fail, "cannot create a user namespace: "+err.Error(), userNSHint()
		if !required {
			c.Status = Warn
		}
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("unprivileged user, mount namespaces work (uid %d)", os.Getuid())
	return c
}

func checkOverlay(ctx context.Context, opts Options, required bool) Check {
	c := Check{Name: "overlayfs in userns", Required: required}
	dir, err := os.MkdirTemp("", "fluffy-doctor-")
	if err != nil {
		c.Status, c.Detail = Fail, err.Error()
		return c
	}
	defer os.RemoveAll(dir)
	if err := probe(ctx, opts, "overlay", dir); err != nil {
		c.Status, c.Detail = Fail, "cannot mount overlayfs inside a user namespace: "+err.Error()
		c.Fix = "needs Linux 5.11+ with overlay built in (modprobe overlay)"
		if !required {
			c.Status = Warn
		}
		return c
	}
	c.Status, c.Detail = OK, "change sets can be mounted as overlay upper layers"
	return c
}

// LandlockABI returns the landlock ABI version the kernel offers, or 0.
func LandlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

func checkLandlock() Check {
	c := Check{Name: "landlock"}
	abi, err := LandlockABI()
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		c.Status, c.Detail, c.Fix = Warn, "built in but disabled", "add landlock to the lsm= kernel boot parameter"
	case err != nil:
		c.Status, c.Detail, c.Fix = Warn, "not available ("+err.Error()+"): sandboxes lose a defence-in-depth layer", "Linux 5.13+ with CONFIG_SECURITY_LANDLOCK"
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("ABI version %d", abi)
	}
	return c
}

func checkSeccomp(required bool) Check {
	c := Check{Name: "seccomp", Required: required}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		c.Status, c.Detail, c.Fix = Fail, "seccomp is not available: "+err.Error(), "a kernel built with CONFIG_SECCOMP_FILTER"
		return c
	}
	actions, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		c.Status, c.Detail = OK, "seccomp filters supported"
		return c
	}
	have := strings.Fields(string(actions))
	for _, want := range []string{"errno", "kill_process"} {
		found := false
		for _, h := range have {
			found = found || h == want
		}
		if !found {
			c.Status, c.Detail, c.Fix = Fail, "seccomp lacks the "+want+" action", "Linux 4.14 or newer"
			return c
		}
	}
	c.Status, c.Detail = OK, "filters with actions: "+strings.Join(have, " ")
	return c
}

func checkCgroups() Check {
	c := Check{Name: "cgroups"}
	v2 := func(dir string) []string {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return nil
		}
		return strings.Fields(string(b))
	}
	var v1 []string
	if f, err := os.Open("/proc/cgroups"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) == 4 && fs[0][0] != '#' && fs[1] != "0" && fs[3] == "1" {
				v1 = append(v1, fs[0])
			}
		}
		f.Close()
	}
	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		ctl := v2("/sys/fs/cgroup")
		c.Status, c.Detail = OK, "v2 (unified), controllers: "+strings.Join(ctl, " ")
		if !contains(ctl, "memory") || !contains(ctl, "pids") {
			c.Status, c.Fix = Warn, "enable the memory and pids controllers so sandbox limits apply"
		}
	case fileExists("/sys/fs/cgroup/unified/cgroup.procs"):
		c.Status = Warn
		c.Detail = "hybrid v1 + v2; v1 controllers: " + strings.Join(v1, " ") + "; v2 controllers: " + strings.Join(v2("/sys/fs/cgroup/unified"), " ")
		c.Fix = "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2 limits; rlimits still apply"
	case len(v1) > 0:
		c.Status, c.Detail = Warn, "v1 only, controllers: "+strings.Join(v1, " ")
		c.Fix = "boot with systemd.unified_cgroup_hierarchy=1; rlimits still apply"
	default:
		c.Status, c.Detail, c.Fix = Warn, "no cgroup filesystem", "mount cgroup2 on /sys/fs/cgroup; rlimits still apply"
	}
	return c
}

// dockerSocket returns the unix socket of the Docker engine named by
// DOCKER_HOST, or the default.
func dockerSocket(getenv func(string) (string, bool)) (string, error) {
	h, ok := getenv("DOCKER_HOST")
	if !ok || h == "" {
		return "/var/run/docker.sock", nil
	}
	if p, ok := strings.CutPrefix(h, "unix://"); ok {
		return p, nil
	}
	return "", fmt.Errorf("DOCKER_HOST=%s: only unix:// sockets are probed", h)
}

func checkDocker(ctx context.Context, opts Options, required bool) Check {
	c := Check{Name: "docker engine", Required: required}
	sock, err := dockerSocket(opts.Getenv)
	if err == nil {
		var version string
		version, err = engineVersion(ctx, opts, sock)
		if err == nil {
			c.Status, c.Detail = OK, "Docker "+version+" at "+sock
			return c
		}
	}
	c.Status, c.Detail = Warn, "not reachable: "+err.Error()
	c.Fix = "apt-get install docker.io && dockerd & (needed only for sandbox.runtime=docker)"
	if required {
		c.Status = Fail
	}
	return c
}

func checkPodman(ctx context.Context, opts Options, required bool) Check {
	c := Check{Name: "podman", Required: required}
	path, err := opts.LookPath("podman")
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, "not installed", "apt-get install podman (needed only for sandbox.runtime=podman)"
		if required {
			c.Status = Fail
		}
		return c
	}
	v, err := runVersion(ctx, opts.Timeout, path, "--version")
	if err != nil {
		c.Status, c.Detail = Warn, err.Error()
		if required {
			c.Status = Fail
		}
		return c
	}
	c.Status, c.Detail = OK, v
	return c
}

// engineVersion asks a Docker-API socket for its version.
func engineVersion(ctx context.Context, opts Options, sock string) (string, error) {
	if !fileExists(sock) {
		return "", fmt.Errorf("no socket at %s", sock)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Version    string `json:"Version"`
		APIVersion string `json:"ApiVersion"`
	}
	if err := decodeJSON(resp, &v); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (API %s)", v.Version, v.APIVersion), nil
}

func checkDataDir(home string) Check {
	c := Check{Name: "data directory", Required: true}
	fi, err := os.Stat(home)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Status, c.Detail = OK, home+" (will be created, mode 0700)"
	case err != nil:
		c.Status, c.Detail = Fail, err.Error()
	case !fi.IsDir():
		c.Status, c.Detail, c.Fix = Fail, home+" is not a directory", "move it away or set FLUFFY_HOME"
	case fi.Mode().Perm()&0o077 != 0:
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("%s has mode %v: others can read keys and logs", home, fi.Mode().Perm()), "chmod 700 "+home
	case unix.Access(home, unix.W_OK) != nil:
		c.Status, c.Detail, c.Fix = Fail, home+" is not writable", "chown it to your user or set FLUFFY_HOME"
	default:
		c.Status, c.Detail = OK, home
	}
	return c
}

// existingParent returns p or its nearest existing ancestor.
func existingParent(p string) string {
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

func checkDisk(home string) Check {
	c := Check{Name: "free disk", Required: true}
	var st unix.Statfs_t
	dir := existingParent(home)
	if err := unix.Statfs(dir, &st); err != nil {
		c.Status, c.Detail = Warn, "cannot stat "+dir+": "+err.Error()
		return c
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	c.Detail = fmt.Sprintf("%s free on the filesystem of %s", humanBytes(free), dir)
	switch {
	case free < 100<<20:
		c.Status, c.Fix = Fail, "free space: the audit log fails closed when it cannot write"
	case free < 1<<30:
		c.Status, c.Fix = Warn, "free space: under 1 GiB left"
	default:
		c.Status = OK
	}
	return c
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
