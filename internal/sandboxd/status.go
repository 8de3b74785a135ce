package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ServerStatus is what Status finds of the server of a socket.
type ServerStatus struct {
	Socket string
	// PID is the server's process, 0 when none runs.
	PID int
	// Log is the file a server started by a client writes to.
	Log string
}

// Running says whether a server was found.
func (s ServerStatus) Running() bool { return s.PID > 0 }

// Status looks for the server of sock: the pid its lock file names, if
// that process is alive and is a server of this socket (a pid reused by
// another process after a kill -9 does not count). It takes no lock and
// does not connect, so it never disturbs a server starting or serving.
func Status(sock string) (ServerStatus, error) {
	st := ServerStatus{Socket: sock, Log: sock + ".log"}
	b, err := os.ReadFile(sock + ".lock")
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("sandboxd: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return st, nil // a lock being written, or left empty
	}
	if isServerOf(pid, sock) {
		st.PID = pid
	}
	return st, nil
}

// isServerOf says whether process pid is alive and serving sock (its
// command line names the socket after "serve").
func isServerOf(pid int, sock string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	serve := false
	for _, a := range args {
		switch {
		case string(a) == "serve":
			serve = true
		case serve && (string(a) == sock || string(a) == "--socket="+sock):
			return true
		}
	}
	return false
}

// Stop asks the server of sock to stop (SIGTERM: it stops accepting and
// lets the calls in flight finish) and waits until it is gone, at most
// until ctx ends. It returns the status found before; stopping no server
// is not an error.
func Stop(ctx context.Context, sock string) (ServerStatus, error) {
	st, err := Status(sock)
	if err != nil || !st.Running() {
		return st, err
	}
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return st, nil
		}
		return st, fmt.Errorf("sandboxd: stop the server (pid %d): %w", st.PID, err)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for isServerOf(st.PID, sock) {
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("sandboxd: the server (pid %d) is still running: %w", st.PID, ctx.Err())
		case <-t.C:
		}
	}
	return st, nil
}

// lockHeld says whether a server holds socket's lock file (one runs, or
// is starting or stopping), without connecting: it takes a shared lock
// for a moment, which a server starting just then sees as taken (it exits
// with ErrRunning; its client then retries the socket). The client uses
// it while waiting for a server it started; Status, which takes no lock,
// is for everyone else.
func lockHeld(socket string) (bool, error) {
	f, err := os.Open(socket + ".lock")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sandboxd: inspect %s: %w", socket, err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case err == nil:
		return false, nil // nobody holds it: no server
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	}
	return false, fmt.Errorf("sandboxd: inspect %s: %w", socket, err)
}
