package uppers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
)

// BusyError reports that another process holds the lock beside an upper
// directory: it has an overlay on it, or is applying or discarding it.
// errors.Is(err, lockfile.ErrBusy) holds for it.
type BusyError struct {
	// Upper is the upper directory.
	Upper string
	// PID is the holder's process id, 0 when the lock file names none.
	PID int
	// Command is the holder's command name (/proc/PID/comm), "" when
	// unknown.
	Command string
	// Err is the lock's own error.
	Err error
}

func (e *BusyError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID)
		if e.Command != "" {
			who += " (" + e.Command + ")"
		}
	}
	return fmt.Sprintf("the change set %s is in use by %s: wait for it to end, or stop it", e.Upper, who)
}

func (e *BusyError) Unwrap() error { return e.Err }

// LockPath is the lock file of upper: beside it, in the directory that
// holds it, so that it never shows in the change set itself. It is
// removed with the lock: the directory looks untouched afterwards.
func LockPath(upper string) string {
	return filepath.Join(filepath.Dir(upper), "."+filepath.Base(upper)+".lock")
}

// FileLock is a process's advisory lock on an upper directory.
type FileLock struct{ l *lockfile.Lock }

// Lock takes the advisory lock beside upper without waiting. A
// *BusyError says another process holds it; so does another Registry
// of this process (flock locks belong to open files): a process's
// sandboxes share one Registry.
func Lock(upper string) (*FileLock, error) {
	upper = canonical(upper)
	l, err := lockfile.Acquire(context.Background(), LockPath(upper), lockfile.Options{WritePID: true, Remove: true})
	var busy *lockfile.BusyError
	if errors.As(err, &busy) {
		e := &BusyError{Upper: upper, PID: busy.PID, Err: err}
		if busy.PID > 0 {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(busy.PID) + "/comm"); err == nil {
				e.Command = strings.TrimSpace(string(b))
			}
		}
		return nil, e
	}
	if err != nil {
		return nil, fmt.Errorf("uppers: the lock beside %s: %w", upper, err)
	}
	return &FileLock{l: l}, nil
}

// Unlock releases the lock. Later calls do nothing.
func (l *FileLock) Unlock() {
	if l != nil {
		_ = l.l.Release()
	}
}
