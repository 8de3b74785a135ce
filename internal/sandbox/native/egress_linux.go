package native

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// proxySocket prepares the egress proxy's socket for network mode proxy:
// it appears inside at sandbox.ProxySocketPath, and the init forwards
// sandbox.ProxyListen to it. A root caller's sandbox runs as host SandboxUID,
// who may not be able to traverse the socket's host directories, so the
// parent clones the socket's mount (open_tree) and hands it to the init as
// a descriptor; other callers' sandboxes run as themselves and bind the
// path. It returns the file to pass as nsinit.ProxyFD, or nil.
func (r *Runtime) proxySocket(cfg *nsinit.Config, spec sandbox.Spec) (*os.File, error) {
	if spec.Network != sandbox.NetworkProxy {
		return nil, nil
	}
	cfg.ProxySocket, cfg.ProxyListen = sandbox.ProxySocketPath, sandbox.ProxyListen
	src, err := filepath.EvalSymlinks(spec.ProxySocket)
	if err != nil {
		return nil, fmt.Errorf("%w: egress proxy socket: %w", sandbox.ErrSetup, err)
	}
	if r.uid != 0 {
		cfg.Mounts = append(cfg.Mounts, nsinit.MountSpec{Source: src, Target: sandbox.ProxySocketPath})
		return nil, nil
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: egress proxy socket: open_tree: %w", sandbox.ErrSetup, err)
	}
	cfg.ProxyFD = true
	return os.NewFile(uintptr(tree), "egress.sock"), nil
}
