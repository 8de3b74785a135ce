package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("engine answered %s", resp.Status)
	}
	var v struct {
		Version    string `json:"Version"`
		APIVersion string `json:"ApiVersion"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("engine's /version: %w", err)
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
