// Package lockfile owns the advisory whole-file locks (flock(2)) by which
// fluffy's processes exclude one another: one writer of the audit log, one
// starter of the kernel, one apply of a change set at a time. A lock lives
// as long as the open file that holds it, so a process that dies, even by
// kill -9, leaves no stale lock behind.
package lockfile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBusy matches every *BusyError: another process holds the lock.
var ErrBusy = errors.New("lockfile: held by another process")

// BusyError is Acquire's answer when another process held the lock for
// as long as the caller would wait.
type BusyError struct {
	Path string
	// PID is the process the lock file names (see Options.WritePID), 0
	// when it names none.
	PID int
	// Err is the context's error when the context ended the wait, nil
	// when Options.Wait ran out.
	Err error
}

func (e *BusyError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID)
	}
	s := fmt.Sprintf("lockfile: %s is locked by %s", e.Path, who)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Unwrap returns the context's error, if the context ended the wait.
func (e *BusyError) Unwrap() error { return e.Err }

// Forever, as Options.Wait, waits for as long as the context allows.
const Forever time.Duration = math.MaxInt64

// poll is the time between two tries while waiting: flock has no
// bounded blocking form, and a short poll keeps a handover quick.
const poll = 10 * time.Millisecond

// Options say how Acquire waits and what it leaves in the file.
type Options struct {
	// Wait is how long to wait for a holder to let go: zero tries once,
	// Forever waits until ctx ends. The wait ends with ctx in any case.
	Wait time.Duration
	// WritePID writes the caller's pid into the file once the lock is
	// held, so that a process that finds it busy can name the holder
	// (BusyError.PID).
	WritePID bool
	// OnBusy, when set, is called once, with the pid the file names (0
	// if none), when the lock is held and Acquire is about to wait: the
	// caller may tell a person, or ask the holder to let go.
	OnBusy func(holder int)
	// Remove removes the file when the lock is released, for a lock
	// beside data whose directory must look untouched afterwards. Every
	// process locking the path must set it: Acquire then takes the lock
	// only on the file still at path (one removed meanwhile locks
	// nothing).
	Remove bool
}

// Lock is a held lock.
type Lock struct {
	f *os.File
	// path is the file Release removes ("": none).
	path string
}

// Release lets the lock go. It may be called more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	var err error
	if l.path != "" {
		// Removed while still locked: a process that opened it meanwhile
		// finds it gone from path once it has the lock, and retries.
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// Acquire takes an exclusive lock on path, creating the file (mode 0600)
// if needed. It tries once before it looks at ctx, so a free lock is taken
// even when ctx has ended. When another process holds the lock for as
// long as opts allow, the error is a *BusyError (errors.Is(err, ErrBusy));
// any other error is an *os.PathError naming the step that failed.
func Acquire(ctx context.Context, path string, opts Options) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := wait(ctx, f, opts); err != nil {
		f.Close()
		return nil, err
	}
	l := &Lock{f: f}
	if opts.Remove {
		if !stillAt(f, path) {
			f.Close()
			return Acquire(ctx, path, opts)
		}
		l.path = path
	}
	if opts.WritePID {
		// Only a hint for whoever finds the lock busy: a failure to
		// write it does not weaken the lock.
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return l, nil
}

// stillAt reports whether f is the file at path.
func stillAt(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// wait tries f's lock until it is taken, opts.Wait runs out or ctx ends.
func wait(ctx context.Context, f *os.File, opts Options) error {
	var expired <-chan time.Time
	if opts.Wait != Forever {
		t := time.NewTimer(opts.Wait)
		defer t.Stop()
		expired = t.C
	}
	var tick *time.Ticker
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		if opts.Wait <= 0 {
			return busy(f, nil)
		}
		if tick == nil {
			if opts.OnBusy != nil {
				opts.OnBusy(holderPID(f.Name()))
			}
			tick = time.NewTicker(poll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return busy(f, ctx.Err())
		case <-expired:
			return busy(f, nil)
		case <-tick.C:
		}
	}
}

func busy(f *os.File, err error) *BusyError {
	return &BusyError{Path: f.Name(), PID: holderPID(f.Name()), Err: err}
}

// holderPID is the pid written in the lock file at path, or 0.
func holderPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
