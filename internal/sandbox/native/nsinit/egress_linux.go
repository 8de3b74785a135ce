package nsinit

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/netproxy/forward"
)

// attachProxySocket mounts the detached socket mount received on ProxyFD
// at dst (in the sandbox root being built).
func attachProxySocket(dst string) error {
	if err := mountPoint(dst, false); err != nil {
		return fmt.Errorf("egress socket mount point: %w", err)
	}
	if err := unix.MoveMount(ProxyFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the egress socket: %w", err)
	}
	return unix.Close(ProxyFD)
}

// startForwarder brings loopback up and forwards cfg.ProxyListen to the
// proxy's socket in this process (goroutines on threads other than the
// restricted one) for the init's lifetime; it is listening when it
// returns, before any command starts.
func startForwarder(cfg *Config) (stop func(), err error) {
	if err := forward.LoopbackUp(); err != nil {
		return nil, err
	}
	return forward.Start(context.Background(), cfg.ProxyListen, cfg.ProxySocket)
}
