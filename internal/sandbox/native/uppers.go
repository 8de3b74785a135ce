package native

import (
	"context"
	"fmt"
	"sync"
)

// Uppers lets at most one overlay use a change set's upper directory at
// a time. Linux leaves two overlays on one upper (or work) directory
// undefined ("upperdir is in-use as upperdir/workdir of another mount"):
// each could cache what the other changes. Every sandbox whose workspace
// is an overlay on a change set holds its upper here from before the
// mount until the sandbox's last process has been reaped (its mount
// namespace, and with it the overlay, is gone then), whether the overlay
// is writable or read-only (Spec.WorkspaceReadOnly). A sandbox built
// ahead holds its upper while it waits; it is idle, and a run that needs
// the upper from another runtime has it discarded (a run of its own
// runtime takes it). A long-lived run (sandbox.Spec.Yield) is asked to
// end when another run needs its upper. Runtimes share one Uppers through Options.Uppers
// (the kernel's sessions); a Runtime without one has its own.
type Uppers struct {
	mu sync.Mutex
	m  map[string]*upperEntry
}

// NewUppers returns an empty registry.
func NewUppers() *Uppers { return &Uppers{m: map[string]*upperEntry{}} }

// upperEntry is one upper directory in use.
type upperEntry struct {
	// evict, set while the holder is an idle sandbox built ahead, asks it
	// to go; cleared once called or when a run takes the sandbox.
	evict func()
	// changed is closed (and replaced) when the holder releases the
	// upper or becomes idle.
	changed chan struct{}
}

// upperHold is a sandbox's hold on its upper directory.
type upperHold struct {
	u     *Uppers
	upper string
	once  sync.Once
}

// try holds upper when nobody does. Otherwise it asks an idle holder to
// go (when evict is true) and returns a channel closed at the holder's
// next change.
func (u *Uppers) try(upper string, evict bool) (*upperHold, <-chan struct{}) {
	u.mu.Lock()
	e := u.m[upper]
	if e == nil {
		u.m[upper] = &upperEntry{changed: make(chan struct{})}
		u.mu.Unlock()
		return &upperHold{u: u, upper: upper}, nil
	}
	ch := e.changed
	var ev func()
	if evict && e.evict != nil {
		ev, e.evict = e.evict, nil
	}
	u.mu.Unlock()
	if ev != nil {
		ev()
	}
	return nil, ch
}

// acquire waits until it holds upper; an idle holder is asked to go.
// claim, when not nil, is tried first and again at each change of the
// holder: a sandbox built ahead by the caller's own runtime on this
// upper, whose hold it takes over (the returned hold is then nil).
func (u *Uppers) acquire(ctx context.Context, upper string, claim func() bool) (*upperHold, error) {
	for {
		if claim != nil && claim() {
			return nil, nil
		}
		h, ch := u.try(upper, true)
		if h != nil {
			return h, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// idle marks the holder as one that may be asked to go (evict, called
// at most once, from another goroutine): a sandbox built ahead, or a
// long-lived run (sandbox.Spec.Yield).
func (h *upperHold) idle(evict func()) {
	if h == nil {
		return
	}
	h.u.mu.Lock()
	e := h.u.m[h.upper]
	e.evict = evict
	close(e.changed)
	e.changed = make(chan struct{})
	h.u.mu.Unlock()
}

// busy marks the holder as in use again (a run took the sandbox).
func (h *upperHold) busy() {
	if h == nil {
		return
	}
	h.u.mu.Lock()
	h.u.m[h.upper].evict = nil
	h.u.mu.Unlock()
}

// release gives the upper up; the sandbox must be gone. Later calls do
// nothing.
func (h *upperHold) release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.u.mu.Lock()
		e := h.u.m[h.upper]
		delete(h.u.m, h.upper)
		h.u.mu.Unlock()
		close(e.changed)
	})
}

// held reports whether a sandbox holds upper (tests).
func (u *Uppers) held(upper string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[upper] != nil
}

// holdUpper holds a run's change set upper ("": none, nothing held),
// waiting while another sandbox has it mounted. When this runtime's
// sandbox built ahead is on that upper (or, for "", on none), it returns
// it with the hold it had (use it, or dropAhead); a sandbox built ahead
// by another runtime on it is discarded first.
func (r *Runtime) holdUpper(ctx context.Context, upper string) (*aheadStart, *upperHold, error) {
	if upper == "" {
		return r.claimAhead(""), nil, nil
	}
	var a *aheadStart
	h, err := r.opts.Uppers.acquire(ctx, upper, func() bool {
		a = r.claimAhead(upper)
		return a != nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: waiting for another sandbox on the change set %s to end: %w", upper, err)
	}
	if a != nil {
		return a, a.hold, nil
	}
	return nil, h, nil
}
