package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Status is what Inspect finds about the server of a socket, for `fluffy
// doctor` and the like.
type Status struct {
	Socket  string
	Running bool // a server holds the socket's lock
	PID     int  // the pid in the lock file while Running, else 0
}

// Inspect says whether a server serves socket, without connecting to it:
// a server holds the lock file beside the socket while it runs. It takes a
// shared lock for a moment, which a server starting just then sees as
// taken (it exits with ErrRunning; its client then retries the socket).
func Inspect(socket string) (Status, error) {
	st := Status{Socket: socket}
	f, err := os.Open(socket + ".lock")
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("sandboxd: inspect %s: %w", socket, err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case err == nil:
		return st, nil // nobody holds it: no server
	case errors.Is(err, unix.EWOULDBLOCK):
		st.Running = true
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		st.PID, _ = strconv.Atoi(strings.TrimSpace(string(b[:n])))
		return st, nil
	}
	return st, fmt.Errorf("sandboxd: inspect %s: %w", socket, err)
}
