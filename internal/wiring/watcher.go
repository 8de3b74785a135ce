package wiring

import (
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// watcher tells whether any watched path changed since a generation was
// taken: one inotify descriptor, read without blocking at each question.
// The kernel queues an event before the write (rename, unlink, chmod)
// that causes it returns, so a change made before a call is always seen
// by that call.
type watcher struct {
	gen atomic.Uint64

	mu  sync.Mutex // guards the fields below and serializes reads of fd
	fd  int        // -1 once closed
	buf [4096]byte
}

// watchMask is every change of a watched file or of a directory's
// entries; reads (access, open) are not changes.
const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &watcher{fd: fd}, nil
}

// add watches path (a directory: its entries too). Adding a path again
// is harmless.
func (w *watcher) add(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return errWatcherClosed
	}
	_, err := unix.InotifyAddWatch(w.fd, path, watchMask)
	return err
}

var errWatcherClosed = errors.New("the policy watcher is closed")

// generation drains the queued events and returns the generation, which
// moves on with every batch of events (or read error: a watcher that
// cannot say is taken as "changed").
func (w *watcher) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return w.gen.Add(1)
	}
	for {
		n, err := unix.Read(w.fd, w.buf[:])
		switch {
		case n > 0:
			w.gen.Add(1)
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
		default:
			w.gen.Add(1)
		}
		return w.gen.Load()
	}
}

// Close closes the descriptor; later generations always differ.
func (w *watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	fd := w.fd
	w.fd = -1
	return unix.Close(fd)
}
