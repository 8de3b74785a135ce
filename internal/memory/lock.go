package memory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
)

// ErrHeld matches every *HeldError: another process holds the index.
var ErrHeld = errors.New("memory: the index is held by another process")

// ErrReadOnly is the error of a write (Sync, SyncPaths, Rebuild, Watch)
// on an index opened by OpenReader.
var ErrReadOnly = errors.New("memory: the index is open for reading only (another process holds it)")

// HeldError says which process holds the index's lock.
type HeldError struct {
	// Lock is the lock file.
	Lock string
	// PID is the holder's, 0 when the lock file names none.
	PID int
	// Err is the lock's own error (a *lockfile.BusyError).
	Err error
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("process %d", e.PID)
		if c := command(e.PID); c != "" {
			who += " (" + c + ")"
		}
	}
	return fmt.Sprintf("memory: the index is held by %s (lock %s)", who, e.Lock)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Unwrap returns the lock's error.
func (e *HeldError) Unwrap() error { return e.Err }

// command is pid's command line as /proc shows it, short, or "".
func command(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	for i := range b {
		if b[i] == 0 {
			b[i] = ' '
		}
	}
	s := string(b)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// LockPath is the lock file of the index at db. Every writer of the
// index holds it: the daemon for as long as it serves, a command or an
// on-demand search while it syncs. It is a file of its own, so the index
// can be deleted and made again under it.
func LockPath(db string) string { return db + ".lock" }

// Lock takes the index's lock, waiting up to wait for a holder to let
// go (zero: try once). Another holder is a *HeldError.
func Lock(ctx context.Context, db string, wait time.Duration) (*lockfile.Lock, error) {
	p := LockPath(db)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("memory: lock the index: %w", err)
	}
	l, err := lockfile.Acquire(ctx, p, lockfile.Options{Wait: wait, WritePID: true})
	var be *lockfile.BusyError
	if errors.As(err, &be) {
		return nil, &HeldError{Lock: p, PID: be.PID, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("memory: lock the index: %w", err)
	}
	return l, nil
}
