package native

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// proxyFD is the init's descriptor for the egress proxy's socket as a
// detached mount (network mode proxy, root callers).
const proxyFD = 7

// proxySocket prepares the egress proxy's socket for network mode proxy:
// it appears inside at sandbox.ProxySocketPath, and the init forwards
// sandbox.ProxyListen to it. A root caller's sandbox runs as host nobody,
// who may not be able to traverse the socket's host directories, so the
// parent clones the socket's mount (open_tree) and hands it to the init as
// a descriptor; other callers' sandboxes run as themselves and bind the
// path. It returns the file to pass as proxyFD, or nil.
func (r *Runtime) proxySocket(cfg *initConfig, spec sandbox.Spec) (*os.File, error) {
	if spec.Network != sandbox.NetworkProxy {
		return nil, nil
	}
	cfg.ProxySocket, cfg.ProxyListen = sandbox.ProxySocketPath, sandbox.ProxyListen
	src, err := filepath.EvalSymlinks(spec.ProxySocket)
	if err != nil {
		return nil, fmt.Errorf("%w: egress proxy socket: %w", sandbox.ErrSetup, err)
	}
	if r.uid != 0 {
		cfg.Mounts = append(cfg.Mounts, mountSpec{Source: src, Target: sandbox.ProxySocketPath})
		return nil, nil
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: egress proxy socket: open_tree: %w", sandbox.ErrSetup, err)
	}
	cfg.ProxyFD = true
	return os.NewFile(uintptr(tree), "egress.sock"), nil
}

// attachProxySocket mounts the detached socket mount received on proxyFD
// at dst (in the sandbox root being built).
func attachProxySocket(dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("egress socket mount point: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("egress socket mount point: %w", err)
	}
	f.Close()
	if err := unix.MoveMount(proxyFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the egress socket: %w", err)
	}
	return unix.Close(proxyFD)
}
