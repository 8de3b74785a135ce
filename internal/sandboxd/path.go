package sandboxd

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxSocketPath is the longest path a unix socket can be bound at on Linux
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// ErrUnsafeDir: the socket's directory could be reached or replaced by
// another user. The *DirError wrapping it names the path and the fix.
var ErrUnsafeDir = errors.New("sandboxd: unsafe socket directory")

// DirError is SocketPath's error about its directory.
type DirError struct {
	Path string
	Why  string // "is a symlink", "belongs to uid 1000", ...
	Fix  string
	Err  error // ErrUnsafeDir, or the system error
}

func (e *DirError) Error() string {
	s := "sandboxd: socket directory " + e.Path + " " + e.Why
	if e.Fix != "" {
		s += ": " + e.Fix
	}
	return s
}

func (e *DirError) Unwrap() error { return e.Err }

// SocketPath is the socket for the server binary core: in a private directory
// ($XDG_RUNTIME_DIR/fluffy if usable, else /tmp/fluffy-<uid>; created 0700,
// refused — with an error naming the path and the fix — when it is a symlink,
// not owned by us or group/other-accessible), named from a hash of core's path,
// size and mtime (a rebuilt fluffy-core gets a new server; the old one idles
// out) and the process umask (the server's children inherit its umask).
//
// $XDG_RUNTIME_DIR is usable when it is an absolute path to an existing
// directory owned by this user whose socket path fits in a socket
// address. The socket is named sandbox-<hash>.sock; beside it are its
// lock (.lock) and the log of the servers clients started (.log).
func SocketPath(core string) (string, error) {
	return socketPath(core, os.Getenv("XDG_RUNTIME_DIR"), os.TempDir(), os.Geteuid())
}

func socketPath(core, runtimeDir, tmp string, uid int) (string, error) {
	name, err := socketName(core)
	if err != nil {
		return "", err
	}
	dir := ""
	if runtimeDir != "" && filepath.IsAbs(runtimeDir) {
		var st syscall.Stat_t
		if syscall.Stat(runtimeDir, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && int(st.Uid) == uid &&
			len(filepath.Join(runtimeDir, "fluffy", name))+len(".lock") <= maxSocketPath {
			dir = filepath.Join(runtimeDir, "fluffy")
		}
	}
	if dir == "" {
		dir = filepath.Join(tmp, "fluffy-"+strconv.Itoa(uid))
	}
	sock := filepath.Join(dir, name)
	if len(sock)+len(".lock") > maxSocketPath {
		return "", fmt.Errorf("sandboxd: socket path %s is %d bytes, more than a socket address takes (%d): set TMPDIR or XDG_RUNTIME_DIR to a shorter directory", sock, len(sock), maxSocketPath)
	}
	if err := privateDir(dir, uid); err != nil {
		return "", err
	}
	return sock, nil
}

// privateDir creates dir 0700 if it is missing, and checks that it is a
// directory (not a symlink to one), owned by uid, with no access for
// group or others.
func privateDir(dir string, uid int) error {
	fix := func(what string) string {
		return what + ", or set XDG_RUNTIME_DIR to a private directory of yours (or turn the server off with FLUFFY_SANDBOX_SERVER=off)"
	}
	var st syscall.Stat_t
	err := syscall.Lstat(dir, &st)
	if errors.Is(err, syscall.ENOENT) {
		if err := syscall.Mkdir(dir, 0o700); err != nil && !errors.Is(err, syscall.EEXIST) {
			return &DirError{Path: dir, Why: "cannot be created (" + err.Error() + ")", Fix: fix("check its parent directory"), Err: err}
		} else if err == nil {
			// The umask may have taken bits away; we created it, set them.
			if err := syscall.Chmod(dir, 0o700); err != nil {
				return &DirError{Path: dir, Why: "cannot be set to 0700 (" + err.Error() + ")", Err: err}
			}
		}
		err = syscall.Lstat(dir, &st)
	}
	if err != nil {
		return &DirError{Path: dir, Why: "cannot be read (" + err.Error() + ")", Fix: fix("check it"), Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT == syscall.S_IFLNK:
		return &DirError{Path: dir, Why: "is a symlink", Fix: fix("remove it (rm " + dir + ") if you did not make it"), Err: ErrUnsafeDir}
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return &DirError{Path: dir, Why: "is not a directory", Fix: fix("remove it (rm " + dir + ")"), Err: ErrUnsafeDir}
	case int(st.Uid) != uid:
		return &DirError{Path: dir, Why: "belongs to uid " + strconv.FormatUint(uint64(st.Uid), 10) + ", not to you (uid " + strconv.Itoa(uid) + ")",
			Fix: fix("have it removed (another user may be waiting for your commands there)"), Err: ErrUnsafeDir}
	case st.Mode&0o077 != 0:
		return &DirError{Path: dir, Why: "is open to group or others (mode " + strconv.FormatUint(uint64(st.Mode&0o777), 8) + ")",
			Fix: fix("restrict it (chmod 700 " + dir + ")"), Err: ErrUnsafeDir}
	}
	return nil
}

// socketName is sandbox-<hash>.sock, the hash over core's path, device,
// inode, size, mtime and ctime (a rebuilt or replaced binary gets another
// server) and this process's identity: umask (a server's children
// inherit its umask), ids and groups, capabilities, no_new_privs, seccomp
// mode and filter count, resource limits, cgroups and namespaces (see
// identity). Processes that differ in any of them never
// share a server.
func socketName(core string) (string, error) {
	abs, err := filepath.Abs(core)
	if err != nil {
		return "", fmt.Errorf("sandboxd: server binary: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err != nil {
		return "", fmt.Errorf("sandboxd: server binary %s: %w", abs, err)
	}
	id, err := readIdentity("/proc/self")
	if err != nil {
		return "", err
	}
	h := fnv.New128a()
	h.Write([]byte(abs))
	h.Write([]byte{0})
	var b []byte
	for _, v := range []uint64{uint64(st.Dev), st.Ino, uint64(st.Size),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec), Version} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	h.Write(b)
	h.Write([]byte(id.key()))
	return "sandbox-" + hex.EncodeToString(h.Sum(nil)[:10]) + ".sock", nil
}
