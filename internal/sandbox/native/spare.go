package native

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// Spare sandboxes (Options.Spares). A spare is a sandbox init started
// ahead of its request: cloned into its new namespaces (and, when it has
// one, born in its cgroup, which has no limits yet), executed, its Go
// runtime up, blocked reading its configuration. It holds nothing of a
// request: no argv, environment, workspace, mounts, seccomp program or
// landlock rules; those come with the configuration, and the init
// applies them exactly as it does for a sandbox started on demand (the
// root is built, the restrictions applied and the command started only
// after the configuration arrives). A request takes a spare whose shape
// fits (a cgroup when the request has memory or pids limits, which are
// then written into it), connects its own stdin, stdout and stderr to
// the spare's pipes, and continues as an ordinary run: configuration,
// gate, release, command, report, teardown. A spare serves exactly one
// request; the pool is refilled in the background, shaped like the last
// request.

// sparePool holds a Runtime's spare sandboxes.
type sparePool struct {
	mu        sync.Mutex
	ready     []*sandboxProc
	launching int
	closed    bool
	// wg counts the goroutines that launch or discard spares (Close
	// waits for them); Add only under mu while not closed.
	wg sync.WaitGroup
	// errs are the failures of spares torn down in the background
	// (Close reports them).
	errs []error
	// used counts the runs that took a spare; launched the spares
	// started.
	used, launched atomic.Int64
}

// takeSpare returns a live spare that fits a request (wantCg: it needs
// a cgroup, into which memory and pids are written), or nil. A spare
// whose init died (killed from outside) is never returned: it is torn
// down in the background. When only spares of the other shape wait, one
// of them is dropped so that the refill (shaped like this request) can
// replace it.
func (r *Runtime) takeSpare(wantCg bool, memory int64, pids int) *sandboxProc {
	p := &r.pool
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil
		}
		idx := -1
		for i, sp := range p.ready {
			if wantCg && sp.cg == nil {
				continue
			}
			idx = i
			if (sp.cg != nil) == wantCg {
				break
			}
		}
		if idx < 0 {
			var drop *sandboxProc
			if len(p.ready) > 0 && len(p.ready)+p.launching >= r.opts.Spares {
				drop = p.ready[0]
				p.ready = p.ready[1:]
			}
			p.mu.Unlock()
			if drop != nil {
				r.discardLater(drop)
			}
			return nil
		}
		sp := p.ready[idx]
		p.ready = slices.Delete(p.ready, idx, idx+1)
		p.mu.Unlock()
		if !sp.alive() {
			r.opts.Logger.Debug("sandbox: a spare's init died; not used")
			r.discardLater(sp)
			continue
		}
		if wantCg && (memory > 0 || pids > 0) {
			if err := sp.cg.setLimits(r.cgl, memory, pids); err != nil {
				// Below what the init already uses, say: a sandbox
				// started on demand reports what happens then.
				r.opts.Logger.Debug("sandbox: limits not accepted by a spare's cgroup", "err", err)
				r.discardLater(sp)
				return nil
			}
		}
		p.used.Add(1)
		return sp
	}
}

// SpareStats reports how many runs took a spare and how many spares were
// started, since New (a server's status; tests).
func (r *Runtime) SpareStats() (used, started int64) {
	return r.pool.used.Load(), r.pool.launched.Load()
}

// refill starts spares in the background until the pool holds
// Options.Spares (ready or starting); withCg gives them a cgroup.
func (r *Runtime) refill(withCg bool) {
	p := &r.pool
	p.mu.Lock()
	need := r.opts.Spares - len(p.ready) - p.launching
	if p.closed || need <= 0 {
		p.mu.Unlock()
		return
	}
	p.launching += need
	p.wg.Add(need)
	p.mu.Unlock()
	for range need {
		go func() {
			defer p.wg.Done()
			sp, err := r.launchSpare(withCg)
			p.mu.Lock()
			p.launching--
			if err != nil {
				p.mu.Unlock()
				r.opts.Logger.Debug("sandbox: starting a spare failed", "err", err)
				return
			}
			if p.closed {
				p.mu.Unlock()
				r.noteErr(r.discard(sp))
				return
			}
			p.ready = append(p.ready, sp)
			p.mu.Unlock()
		}()
	}
}

// launchSpare starts one spare: with a cgroup of its own (no limits
// yet) when withCg and the host has them; for root, with the socket the
// idmapped workspace comes on; stdin always a pipe.
func (r *Runtime) launchSpare(withCg bool) (*sandboxProc, error) {
	var cg *cgroup
	if withCg && r.cgl.available {
		var err error
		if cg, err = newCgroup(r.cgl, 0, 0); err != nil {
			r.opts.Logger.Debug("sandbox: no cgroup for a spare", "err", err)
			cg = nil
		}
	}
	sp, err := r.launch(launchOpts{cg: cg, fdSock: r.uid == 0, stdin: true}, &nsinit.Tracer{})
	if err == nil {
		r.pool.launched.Add(1)
	}
	return sp, err
}

// discard ends a sandbox that will not run a request: its stdio goes
// nowhere, its init is killed and reaped, its cgroup removed.
func (r *Runtime) discard(sp *sandboxProc) error {
	sp.connect(nil, io.Discard, io.Discard)
	sp.kill()
	_ = sp.proc.Wait()
	return sp.release()
}

// discardLater discards sp in the background (Close waits for it), or at
// once when the runtime is closed.
func (r *Runtime) discardLater(sp *sandboxProc) {
	p := &r.pool
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		r.noteErr(r.discard(sp))
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		r.noteErr(r.discard(sp))
	}()
}

func (r *Runtime) noteErr(err error) {
	if err == nil {
		return
	}
	r.opts.Logger.Warn("sandbox cgroup left behind", "err", err)
	r.pool.mu.Lock()
	r.pool.errs = append(r.pool.errs, err)
	r.pool.mu.Unlock()
}

// Close ends the runtime's spare sandboxes and the one built ahead
// (PrepareNext): it kills and reaps every spare's init, removes their
// cgroups and waits for spares being started or torn down in the
// background. Runs in progress are not waited for
// (each tears its own sandbox down before it returns); runs after Close
// work, without spares. It is safe to call more than once; later calls
// wait for the same and return nil.
func (r *Runtime) Close() error {
	r.closeAhead()
	if r.idmap.fd > 0 {
		// Once made (idmapNS), it is never made again.
		unix.Close(r.idmap.fd)
		r.idmap.fd = -1
	}
	if r.reaper.f != nil {
		r.reaper.f.Close()
	}
	r.closeNetNS()
	p := &r.pool
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, sp := range ready {
		r.noteErr(r.discard(sp))
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// alive reports whether the spare's init still waits for its
// configuration: it is not exiting (the main thread of a dying process
// is a zombie while its other threads still exit and hold its files)
// and its status pipe is neither readable nor closed (an init writes its
// status only once it has a configuration, or when it dies). A spare
// that dies after this check, before reading its configuration, is
// replaced by run (see unread).
func (sp *sandboxProc) alive() bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(sp.proc.Pid()) + "/stat"); err != nil {
		return false
	} else if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X' {
		return false
	}
	rc, err := sp.stR.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			ok = err == nil && n == 0
			return
		}
	})
	return ok
}

// late is an io.Writer or io.Reader connected later: a spare's output is
// copied from its start and its stdin read from then, the request it
// serves comes later. Writes and reads before connect wait for it. The
// channel orders connect's store before every later load (what the race
// detector cannot see through the init's pipes is ordered here).
type late[T any] struct {
	ready chan struct{}
	v     T
}

func newLate[T any]() *late[T] { return &late[T]{ready: make(chan struct{})} }

// connect sets the destination or source; call it once.
func (l *late[T]) connect(v T) {
	l.v = v
	close(l.ready)
}

// get waits for connect.
func (l *late[T]) get() T {
	<-l.ready
	return l.v
}

// lateWriter passes writes to the writer connected later.
type lateWriter struct{ *late[io.Writer] }

func newLateWriter() lateWriter { return lateWriter{newLate[io.Writer]()} }

func (l lateWriter) Write(p []byte) (int, error) { return l.get().Write(p) }

// lateReader reads from the reader connected later (nil: none, EOF at
// once).
type lateReader struct{ *late[io.Reader] }

func newLateReader() lateReader { return lateReader{newLate[io.Reader]()} }

func (l lateReader) Read(p []byte) (int, error) {
	r := l.get()
	if r == nil {
		return 0, io.EOF
	}
	return r.Read(p)
}

// SweepStale removes what sandboxes of fluffy processes that are gone
// left behind (their cgroups, when such a process was killed with
// SIGKILL: its sandboxes die with it, their cgroup directories stay) and
// returns how many it removed. The sandbox server calls it when it
// starts.
func (r *Runtime) SweepStale() (int, error) {
	r.detect()
	return r.cgl.sweep()
}
