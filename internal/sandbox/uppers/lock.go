package uppers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// BusyError reports that another process holds the lock beside an upper
// directory: it has an overlay on it, or is applying or discarding it.
type BusyError struct {
	// Upper is the upper directory.
	Upper string
	// Holder names the process that holds it ("pid 123 (fluffy)"), or
	// is empty when it could not be read.
	Holder string
}

func (e *BusyError) Error() string {
	h := e.Holder
	if h == "" {
		h = "another process"
	}
	return fmt.Sprintf("the change set %s is in use by %s: wait for it to end, or stop it", e.Upper, h)
}

// FileLock is a process's advisory lock on an upper directory.
type FileLock struct {
	f    *os.File
	path string
}

// LockPath is the lock file of upper: beside it, in the directory that
// holds it, so that it never shows in the change set itself.
func LockPath(upper string) string {
	return filepath.Join(filepath.Dir(upper), "."+filepath.Base(upper)+".lock")
}

// Lock takes the advisory lock beside upper without waiting, and writes
// this process's name into it for a process it turns away. A
// *BusyError says another process (or another Registry of this one)
// holds it.
func Lock(upper string) (*FileLock, error) {
	path := LockPath(upper)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("uppers: lock beside %s: %w", upper, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &BusyError{Upper: upper, Holder: strings.TrimSpace(string(holder))}
			}
			return nil, fmt.Errorf("uppers: lock beside %s: %w", upper, err)
		}
		// The holder before removes the file before it unlocks: a lock
		// on a file no longer at path is no lock. Take the new one.
		var fst, pst unix.Stat_t
		if unix.Fstat(int(f.Fd()), &fst) != nil || unix.Stat(path, &pst) != nil || fst.Ino != pst.Ino || fst.Dev != pst.Dev {
			f.Close()
			continue
		}
		me := "pid " + strconv.Itoa(os.Getpid())
		if exe, err := os.Executable(); err == nil {
			me += " (" + filepath.Base(exe) + ")"
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(me+"\n"), 0)
		}
		return &FileLock{f: f, path: path}, nil
	}
}

// Unlock removes the lock file and releases the lock. Later calls do
// nothing.
func (l *FileLock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path)
	_ = l.f.Close()
	l.f = nil
}
