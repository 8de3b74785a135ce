package ipc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SocketName is the socket's file name inside the data directory.
const SocketName = "kernel.sock"

// MaxSocketPath is the longest path a unix socket can be bound at on Linux
// (sun_path is 108 bytes with the terminating NUL).
const MaxSocketPath = 107

// SocketPath chooses where the kernel serving the data directory home
// listens. With a usable runtime directory (runtimeDir is
// $XDG_RUNTIME_DIR: absolute, an existing directory owned by this user) it
// is runtimeDir/fluffy/kernel-<hash of home>.sock, so that two data
// directories never share a kernel and the path stays short; otherwise
// home/kernel.sock.
func SocketPath(runtimeDir, home string) string {
	if runtimeDir != "" && filepath.IsAbs(runtimeDir) {
		if fi, err := os.Stat(runtimeDir); err == nil && fi.IsDir() && ownedByMe(fi) {
			sum := sha256.Sum256([]byte(filepath.Clean(home)))
			return filepath.Join(runtimeDir, "fluffy", "kernel-"+hex.EncodeToString(sum[:6])+".sock")
		}
	}
	return filepath.Join(home, SocketName)
}

func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// Listen errors.
var (
	// ErrInUse: another process answers on the socket.
	ErrInUse = errors.New("ipc: socket in use by a running server")
	// ErrNotSocket: something other than a socket sits at the path, and
	// Listen will not remove it.
	ErrNotSocket = errors.New("ipc: path exists and is not a socket")
	// ErrPathTooLong: the path does not fit in a unix socket address.
	ErrPathTooLong = errors.New("ipc: socket path too long")
)

// Listener is a listening kernel socket. Close stops listening and removes
// the socket file, unless another server has replaced it since.
type Listener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo
}

// Close closes the listener and removes its socket file if it is still
// this listener's.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if fi, e := os.Lstat(l.path); e == nil && os.SameFile(fi, l.fi) {
		_ = os.Remove(l.path)
	}
	return err
}

// Path is where the listener is reachable.
func (l *Listener) Path() string { return l.path }

// Listen binds a unix socket at path, private to this user: its directory
// is created 0700 (an existing one must be owned by this user and is
// tightened to 0700), the socket file is 0600. The socket is bound and
// set listening under a temporary name and then linked into place, so a
// client never finds a socket file that does not accept yet (which it
// would take for stale) nor one with a wider mode. A socket file left by a
// dead server (nobody answers) is replaced; one with a live server gives
// ErrInUse.
func Listen(path string) (*Listener, error) {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	if len(tmp) > MaxSocketPath {
		return nil, fmt.Errorf("%w: %d bytes at %s (at most %d with room for a temporary name): choose a shorter data directory or set XDG_RUNTIME_DIR", ErrPathTooLong, len(path), path, MaxSocketPath-(len(tmp)-len(path)))
	}
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := RemoveStale(path); err != nil {
		return nil, err
	}
	_ = os.Remove(tmp) // left by a process of ours with the same pid
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	defer os.Remove(tmp)
	// The directory is 0700 already; the mode is the second fence.
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("ipc: restrict %s to 0600: %w", path, err)
	}
	// link fails if a file appeared at path meanwhile: never replace
	// another server's socket.
	for try := 0; ; try++ {
		err = os.Link(tmp, path)
		if err == nil || try == 1 || !errors.Is(err, fs.ErrExist) {
			break
		}
		if err = RemoveStale(path); err != nil {
			break
		}
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("ipc: listen on %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("ipc: listen on %s: %w", path, err)
	}
	return &Listener{UnixListener: ln, path: path, fi: fi}, nil
}

// EnsureDir creates the socket directory dir with mode 0700, or checks
// that an existing one belongs to this user (an error wrapping
// fs.ErrPermission otherwise) and tightens its mode to 0700.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ipc: create socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("ipc: socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("ipc: socket directory %s is not a directory", dir)
	}
	if !ownedByMe(fi) {
		return fmt.Errorf("ipc: socket directory %s belongs to another user: %w", dir, fs.ErrPermission)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("ipc: restrict socket directory %s: %w", dir, err)
		}
	}
	return nil
}

// RemoveStale removes the socket file at path when no server answers on
// it. It returns nil when there is no file, ErrInUse when a server
// answers, ErrNotSocket when the file is not a socket.
func RemoveStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ipc: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		kind := "a " + fi.Mode().Type().String()
		switch {
		case fi.Mode().IsRegular():
			kind = "a regular file"
		case fi.IsDir():
			kind = "a directory"
		}
		return fmt.Errorf("%w: %s is %s", ErrNotSocket, path, kind)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("ipc: probe %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ipc: remove stale socket %s: %w", path, err)
	}
	return nil
}

// Cred is a peer's credentials as the kernel saw them at connect time
// (SO_PEERCRED): not forgeable by the peer.
type Cred struct {
	PID int32  `json:"pid"`
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// PeerCred reads the credentials of the process at the other end of c.
func PeerCred(c *net.UnixConn) (Cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("ipc: peer credentials: %w", err)
	}
	var uc *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		uc, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return Cred{}, fmt.Errorf("ipc: peer credentials: %w", err)
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("ipc: peer credentials: %w", serr)
	}
	return Cred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}

// dialUnix connects to path, honouring ctx.
func dialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
