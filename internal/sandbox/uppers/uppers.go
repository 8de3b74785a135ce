// Package uppers owns the rule that at most one overlay uses a change
// set's upper directory at a time, whatever runtime mounts it. Linux
// leaves two overlays on one upper (or work) directory undefined
// ("upperdir is in-use as upperdir/workdir of another mount"), and an
// overlay that reads the directory as a lower layer while another writes
// it is undefined as well (changes to an overlay's layers underneath it):
// each could cache what the other changes, and writes are lost.
//
// In one process, sandboxes of every runtime (native and container)
// share one Registry: a sandbox holds the upper from before its overlay
// is mounted until it is unmounted, writable or read-only. A holder that
// may be asked to go (a sandbox started ahead of its command, a
// long-lived run that yields) marks itself Idle; a sandbox that needs
// the upper has it evicted and waits for it to end.
//
// Across processes (the kernel and a `fluffy sandbox run` or `fluffy
// changeset apply` on the same directory) the first hold of a process
// takes an advisory lock (flock) on a file beside the upper directory,
// which it keeps until its last hold ends; a second process fails with a
// *BusyError naming the holder rather than mounting or applying under
// it (Lock is that lock alone, for a process that reads or writes the
// upper directory without mounting it).
package uppers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
)

// ErrHeld reports that a sandbox of this process holds the upper and is
// idle: a sandbox started ahead of its command is not needed beside it.
var ErrHeld = errors.New("another sandbox of this process has the change set mounted")

// Registry lets at most one sandbox of this process hold an upper
// directory at a time. The zero value is not usable: NewRegistry.
type Registry struct {
	mu sync.Mutex // guards m
	m  map[string]*entry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]*entry{}} }

// entry is one upper directory in use.
type entry struct {
	// idle is set while the holder may be asked to go.
	idle bool
	// evict, set while the holder is idle, asks it to go; cleared once
	// called or when the holder is busy again.
	evict func()
	// changed is closed (and replaced) when the holder releases the
	// upper or becomes idle.
	changed chan struct{}
	// lock is the process's advisory lock beside the upper.
	lock *FileLock
}

// Hold is a sandbox's hold on an upper directory. Its methods may be
// called on a nil Hold (a sandbox without a change set) and do nothing.
type Hold struct {
	r     *Registry
	upper string
	once  sync.Once
}

// Upper is the directory held.
func (h *Hold) Upper() string {
	if h == nil {
		return ""
	}
	return h.upper
}

// Try holds upper when no sandbox of this process does. Otherwise it
// asks an idle holder to go (when evict is true) and returns a channel
// closed at the holder's next change, and whether the holder is idle.
// A *BusyError says another process holds it.
func (r *Registry) Try(upper string, evict bool) (h *Hold, changed <-chan struct{}, idle bool, err error) {
	upper = canonical(upper)
	r.mu.Lock()
	e := r.m[upper]
	if e == nil {
		// The lock is taken under r.mu: it does not wait.
		l, err := Lock(upper)
		if err != nil {
			r.mu.Unlock()
			return nil, nil, false, err
		}
		r.m[upper] = &entry{changed: make(chan struct{}), lock: l}
		r.mu.Unlock()
		return &Hold{r: r, upper: upper}, nil, false, nil
	}
	ch, idle := e.changed, e.idle
	var ev func()
	if evict && e.evict != nil {
		ev, e.evict = e.evict, nil
	}
	r.mu.Unlock()
	if ev != nil {
		ev()
	}
	return nil, ch, idle, nil
}

// Acquire waits until it holds upper; an idle holder is asked to go.
// claim, when not nil, is tried first and again at each change of the
// holder: a sandbox started ahead by the caller's own runtime on this
// upper, whose hold it takes over (the returned hold is then nil).
func (r *Registry) Acquire(ctx context.Context, upper string, claim func() bool) (*Hold, error) {
	for {
		if claim != nil && claim() {
			return nil, nil
		}
		h, ch, _, err := r.Try(upper, true)
		if err != nil || h != nil {
			return h, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// AcquireAhead holds upper for a sandbox started ahead of its command:
// it waits while a busy holder (a command) has it, evicts nobody, and
// fails with ErrHeld when the holder is idle (a sandbox already waits on
// the upper for the next command).
func (r *Registry) AcquireAhead(ctx context.Context, upper string) (*Hold, error) {
	for {
		h, ch, idle, err := r.Try(upper, false)
		switch {
		case err != nil || h != nil:
			return h, err
		case idle:
			return nil, fmt.Errorf("%w: %s", ErrHeld, upper)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Idle marks the holder as one that may be asked to go: evict is called
// at most once, from another goroutine, and must not wait for the
// holder to end.
func (h *Hold) Idle(evict func()) {
	if h == nil {
		return
	}
	h.r.mu.Lock()
	e := h.r.m[h.upper]
	e.idle, e.evict = true, evict
	close(e.changed)
	e.changed = make(chan struct{})
	h.r.mu.Unlock()
}

// Busy marks the holder as in use again (a command took the sandbox).
func (h *Hold) Busy() {
	if h == nil {
		return
	}
	h.r.mu.Lock()
	e := h.r.m[h.upper]
	e.idle, e.evict = false, nil
	h.r.mu.Unlock()
}

// Release gives the upper up; the sandbox's overlay must be unmounted.
// Later calls do nothing.
func (h *Hold) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.r.mu.Lock()
		e := h.r.m[h.upper]
		delete(h.r.m, h.upper)
		// Under r.mu: a new holder's Lock cannot run before this one's
		// lock is gone.
		e.lock.Unlock()
		h.r.mu.Unlock()
		close(e.changed)
	})
}

// Held reports whether a sandbox of this process holds upper.
func (r *Registry) Held(upper string) bool {
	upper = canonical(upper)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[upper] != nil
}

// canonical names upper by its resolved path, so that every path to the
// directory is one entry and one lock.
func canonical(upper string) string {
	if r, err := filepath.EvalSymlinks(upper); err == nil {
		return r
	}
	return filepath.Clean(upper)
}
