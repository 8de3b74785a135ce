package native

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Network namespaces made ahead of time for direct starts.
//
// A new network namespace is the dearest part of a sandbox's clone
// (its loopback device, every protocol's per-namespace state): about
// 0.7 ms of the clone (docs/benchmarks.md, the row "inside the clone": 0.60 ms made ahead, 1.30 with CLONE_NEWNET), all on the
// command's critical path. A root Runtime makes the next run's namespace
// while nothing waits for it, right after a run took the last one: a
// thread of its own unshares one, keeps a descriptor, and goes back to
// this process's namespace. The direct start's cloning thread enters it
// just before the clone (which then has no CLONE_NEWNET) and leaves it
// right after; the descriptor is closed then, so each namespace serves
// exactly one sandbox, fresh as one made by the clone: only a loopback,
// down. It is owned by the initial user namespace, not by the sandbox's:
// nothing inside the sandbox can configure it (the clone's own is the
// sandbox's, configurable by its uid 0 until the capabilities go).
// Unprivileged runtimes cannot enter a namespace of another user
// namespace from a multithreaded process, and keep CLONE_NEWNET.
type netnsPool struct {
	once sync.Once
	// orig is this process's network namespace (-1: no pool), set once
	// and kept open for the process's life.
	orig    int
	mu      sync.Mutex // guards the rest
	next    int        // a ready namespace when ready
	ready   bool
	filling bool
	taken   bool // a run asked before
	broken  bool // making one failed: no more tries
	closed  bool
}

// takeNetNS returns a fresh network namespace's descriptor, which the
// caller closes, or -1 (none ready: the clone makes one), and starts
// making the next: from the second run on, so that a process that runs
// one sandbox (fluffy without its server) does not make one for nothing.
func (r *Runtime) takeNetNS() int {
	p := &r.netns
	p.once.Do(func() {
		p.orig = -1
		if r.uid != 0 || r.opts.NoNetNSPool {
			return
		}
		if fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			p.orig = fd
		}
	})
	if p.orig < 0 {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := -1
	if p.ready {
		fd, p.ready = p.next, false
	}
	if p.taken && !p.filling && !p.closed && !p.broken {
		p.filling = true
		go r.fillNetNS()
	}
	p.taken = true
	return fd
}

// fillNetNS makes the pool's next namespace. A failure turns the pool
// off: runs go on with CLONE_NEWNET.
func (r *Runtime) fillNetNS() {
	p := &r.netns
	fd, err := makeNetNS(p.orig)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filling = false
	switch {
	case err != nil:
		r.opts.Logger.Debug("sandbox: no network namespaces made ahead", "err", err)
		p.broken = true
	case p.closed || p.ready:
		unix.Close(fd)
	default:
		p.next, p.ready = fd, true
	}
}

// makeNetNS makes a network namespace on a thread of its own and returns
// its descriptor; the thread goes back to orig, or ends with this
// goroutine if it cannot.
func makeNetNS(orig int) (int, error) {
	done := make(chan struct{})
	var fd int
	var err error
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			return
		}
		fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	return fd, err
}

// closeNetNS releases the pool (Close).
func (r *Runtime) closeNetNS() {
	p := &r.netns
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.ready {
		unix.Close(p.next)
		p.ready = false
	}
}

// enterNetNS moves the calling (locked) thread into the namespace fd;
// leaveNetNS takes it back to this process's.
func (r *Runtime) enterNetNS(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }
func (r *Runtime) leaveNetNS() error       { return unix.Setns(r.netns.orig, unix.CLONE_NEWNET) }
