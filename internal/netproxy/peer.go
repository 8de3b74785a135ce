package netproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a unix-socket connection, as
// the kernel reports it (SO_PEERCRED), in this process's namespaces.
type Peer struct {
	PID, UID, GID int
}

// PeerRefusal is a connection the proxy closed unread because its peer
// may not use the proxy.
type PeerRefusal struct {
	Sandbox, Session string
	Peer             Peer
	Reason           string
	// Count is how many connections this peer uid has had refused so
	// far; the Recorder hears of the first only (see PeerRecorder).
	Count int
}

// PeerRecorder is a Recorder that is also told of refused connections.
// The proxy calls it for the first refusal of each peer uid only, so
// another user cannot flood the owner's audit log; every refusal is
// logged. An error is logged and changes nothing (nothing was relayed).
type PeerRecorder interface {
	RecordPeerRefused(ctx context.Context, r PeerRefusal) error
}

// errNotUnix is the reason for connections that carry no credentials.
var errNotUnix = errors.New("not a unix-socket connection: its peer cannot be identified")

// peerOf returns the credentials of c's peer, and a pidfd for it (-1 when
// the kernel has no SO_PEERPIDFD) that the caller closes.
func peerOf(c net.Conn) (Peer, int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, -1, errNotUnix
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, -1, err
	}
	var cred *unix.Ucred
	var gerr error
	pidfd := -1
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = v
		}
	}); err != nil {
		return Peer{}, -1, err
	}
	if gerr != nil {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		return Peer{}, -1, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, pidfd, nil
}

// OwnerOrDescendant is the default peer policy: a connection is accepted
// from a process of uid (the proxy's owner), or from a process that
// descends from the process pid (the proxy's own: the sandboxes it
// starts, whose host uid may be another, such as nobody for root's). Any
// other process is refused, whatever the socket's permissions let it do.
func OwnerOrDescendant(uid, pid int) func(Peer) error {
	return func(p Peer) error {
		if p.UID == uid {
			return nil
		}
		if p.PID <= 0 {
			return fmt.Errorf("uid %d is not the owner's (%d) and its pid is not visible here", p.UID, uid)
		}
		if descends(p.PID, pid) {
			return nil
		}
		return fmt.Errorf("uid %d (pid %d) is neither the owner (uid %d) nor a process this proxy's run started", p.UID, p.PID, uid)
	}
}

// descends reports whether pid is ancestor or one of its descendants,
// following parent links in /proc.
func descends(pid, ancestor int) bool {
	for range 4096 { // no chain is longer than the pid space allows; bound it anyway
		if pid == ancestor {
			return true
		}
		if pid <= 1 {
			return false
		}
		ppid, err := parentOf(pid)
		if err != nil {
			return false
		}
		pid = ppid
	}
	return false
}

// parentOf reads pid's parent from /proc/PID/stat (the fourth field,
// after the command name in parentheses, which may itself hold any byte).
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	ppid, err := statParent(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ppid, nil
}

// statParent parses the parent pid out of a /proc/PID/stat line. The
// command name (any process may choose its own, parentheses included)
// ends at the line's last ')'.
func statParent(b []byte) (int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, errors.New("too short")
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil || ppid < 0 {
		return 0, fmt.Errorf("parent pid %q", f[1])
	}
	return ppid, nil
}

// checkPeer applies the proxy's peer policy to c. With a pidfd the peer is
// checked to be still alive after its /proc entries were read, so that a
// recycled pid cannot stand in for a process that exited.
func (p *Proxy) checkPeer(c net.Conn) (Peer, error) {
	peer, pidfd, err := peerOf(c)
	if err != nil {
		return peer, err
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if err := p.allowPeer(peer); err != nil {
		return peer, err
	}
	if pidfd >= 0 && peer.UID != p.ownerUID {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); errors.Is(err, unix.ESRCH) {
			return peer, fmt.Errorf("pid %d exited while being checked", peer.PID)
		}
	}
	return peer, nil
}
