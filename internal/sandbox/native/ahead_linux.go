//go:build amd64 || arm64

package native

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"golang.org/x/sys/unix"
)

// Ahead starts (Runtime.PrepareNext). A direct start's PID 1 does all
// of a sandbox's work up to the command before the command is known:
// namespaces, id maps, the root with the workspace's overlay on its
// change set, pivot_root, capabilities, no_new_privs, landlock, seccomp;
// then it waits at the gate. Only the command's own process depends on
// the request beyond that: its rlimits and its exec. So the runtime can
// build the next sandbox while nobody waits for it, shaped like a spec
// the caller expects next (the sandbox server: like the last run, on a
// new throw-away change set), and a run whose spec has that shape takes
// it. Taking it fills in the program's placeholders (fillTail: the
// rlimits, the command's path candidates, argv and environment, in the
// memory PID 1 shares with this process, before the release byte that
// PID 1 reads them after), writes the request's limits into its cgroup,
// connects the request's stdio, and from there the run is an ordinary
// gated direct start: the gate (exec.start recorded), the release, the
// command, the report, the teardown.
//
// The shape is everything of the init's configuration but the command's
// argv, environment and rlimits and the overlay's work directory (which
// the ahead start owns), and whether it has a cgroup: any difference and
// the run starts its own sandbox. A run on the same change set as an
// ahead start (or, without a change set, any run without one) always
// takes it over, to use or to discard, and no run mounts its own
// overlay on that upper before the discarded one is gone: two overlays
// on one upper directory are undefined (uppers.go).
//
// An ahead start needs landlock: without it, PID 1 would hold ForkLock
// until the command started (direct_linux.go), so every other start of
// this process would wait for the next request.

// aheadResources are the rlimits a run may set (addRlimits); an ahead
// program has a placeholder for each.
var aheadResources = [...]int{unix.RLIMIT_CPU, unix.RLIMIT_FSIZE, unix.RLIMIT_NOFILE, unix.RLIMIT_AS, unix.RLIMIT_NPROC}

// aheadTail is where an ahead program's request-specific ops are.
type aheadTail struct {
	rlimits [len(aheadResources)]struct {
		op  int
		lim *unix.Rlimit
	}
	exec int
}

// aheadRlimits appends a skipped prlimit for each of aheadResources.
func (p *childProg) aheadRlimits() {
	for i, res := range aheadResources {
		lim := &unix.Rlimit{}
		p.tail.rlimits[i].lim = lim
		p.tail.rlimits[i].op = p.add("rlimits", "resource "+strconv.Itoa(res), childOp{nr: unix.SYS_PRLIMIT64, a: [6]uintptr{0, uintptr(res)},
			p: [6]unsafe.Pointer{2: p.ptr(lim, unsafe.Pointer(lim))}, kind: opSkip})
	}
}

// fillTail fills an ahead program's placeholders with cfg's rlimits and
// command. PID 1 must not have passed the gate: it reads them after.
func (p *childProg) fillTail(cfg *nsinit.Config, sc sandbox.Scratch) error {
	if len(cfg.Argv) == 0 {
		return fmt.Errorf("%w: no command", sandbox.ErrInvalidSpec)
	}
	for _, rl := range cfg.Rlimits {
		i := -1
		for k, res := range aheadResources {
			if res == rl.Resource {
				i = k
			}
		}
		if i < 0 {
			return fmt.Errorf("rlimit %d has no placeholder", rl.Resource)
		}
		t := p.tail.rlimits[i]
		*t.lim = unix.Rlimit{Cur: rl.Value, Max: rl.Value}
		p.ops[t.op].kind = opPlain
	}
	op, what := p.execOp(cfg, sc)
	if p.err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, p.err)
	}
	p.ops[p.tail.exec], p.what[p.tail.exec] = op, opWhat{"command", what}
	return nil
}

// aheadStart is a sandbox built ahead (Runtime.PrepareNext).
type aheadStart struct {
	d *directStart
	// key is the shape (aheadKey); withCg whether it has a cgroup.
	key    []byte
	withCg bool
	upper  string
	// hold is the start's hold on upper (nil without one); a run that
	// takes the start takes it over.
	hold *uppers.Hold
	// work is the overlay's work directory, removed with the sandbox.
	work string
	// The request's stdio, connected when it is taken (late).
	stdin          lateReader
	stdout, stderr lateWriter
	connectOnce    sync.Once
	// discarded is called once the sandbox is gone if no run took it.
	discarded func()
}

func (a *aheadStart) connect(stdin io.Reader, stdout, stderr io.Writer) {
	a.connectOnce.Do(func() {
		a.stdin.connect(stdin)
		a.stdout.connect(stdout)
		a.stderr.connect(stderr)
	})
}

// aheadKey is cfg's shape: its encoding without the command's argv,
// environment and rlimits, the work directory and the trace flag.
func aheadKey(cfg *nsinit.Config) []byte {
	c := *cfg
	c.Argv, c.Env, c.Rlimits, c.Work, c.Trace = nil, nil, nil, "", false
	return c.AppendBinary(nil)
}

// aheadSlot holds a Runtime's ahead start.
type aheadSlot struct {
	mu     sync.Mutex
	a      *aheadStart
	closed bool
	// wg counts discards under way (Close waits for them).
	wg sync.WaitGroup
	// used and discarded count ahead starts (tests, a server's status).
	used, discarded atomic.Int64
}

// PrepareNext builds a sandbox for a run like spec ahead of it (see
// above): the next run whose spec has spec's shape (everything but its
// argv, environment and limits other than having memory or process
// limits) takes it and skips the sandbox's construction. It replaces
// the sandbox an earlier call prepared. discarded (may be nil) is
// called, from another goroutine, once the sandbox is gone without
// having been used: by Close, a later PrepareNext, or a run on the same
// change set whose shape differs. The spec's change set directory must
// stay as it is until then, or until the run that takes it has ended.
// It returns an error when spec cannot be prepared (network mode proxy,
// no landlock, a host without direct starts...): runs are then started
// on demand, as without it.
func (r *Runtime) PrepareNext(spec sandbox.Spec, discarded func()) error {
	if spec.Network == sandbox.NetworkProxy {
		return fmt.Errorf("%w: network mode proxy is never prepared ahead", sandbox.ErrInvalidSpec)
	}
	if len(spec.Argv) == 0 {
		spec.Argv = []string{"true"} // the shape does not depend on it
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := noImage(spec); err != nil {
		return err
	}
	var res sandbox.Result
	cfg, err := r.config(spec, &nsinit.Tracer{}, &res)
	if err != nil {
		return err
	}
	if cfg.Landlock == 0 {
		return fmt.Errorf("%w: an ahead start needs landlock", sandbox.ErrSetup)
	}
	lim := spec.Limits
	wantCg := r.wantsCgroup(lim)
	if !r.directOK(cfg, wantCg) {
		return fmt.Errorf("%w: this host has no direct starts", sandbox.ErrSetup)
	}
	cfg.LowerFD = r.lowerFD(cfg)
	hold, err := r.holdUpperAhead(cfg.Upper)
	if err != nil {
		return err
	}
	a := &aheadStart{hold: hold, key: aheadKey(cfg), upper: cfg.Upper, stdin: newLateReader(), stdout: newLateWriter(), stderr: newLateWriter(), discarded: discarded}
	if cfg.Upper != "" {
		if a.work, err = makeWork(cfg.Upper); err != nil {
			hold.Release()
			return err
		}
		cfg.Work = a.work
	}
	var cg *cgroup
	if wantCg {
		if cg, err = newCgroup(r.cgl, 0, 0); err != nil {
			removeWork(a.work)
			hold.Release()
			return fmt.Errorf("%w: cgroup: %w", sandbox.ErrSetup, err)
		}
		a.withCg = true
	}
	a.d, err = r.buildDirect(cfg, cg, a.stdin, a.stdout, a.stderr, directOpts{ahead: true, pid1Pause: r.pid1Pause}, &nsinit.Tracer{})
	if err != nil {
		removeWork(a.work)
		hold.Release()
		return fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	s := &r.ahead
	s.mu.Lock()
	old := s.a
	s.a = a
	if s.closed {
		s.a, old = nil, a
	}
	s.mu.Unlock()
	if old != nil {
		r.discardAheadLater(old)
	}
	// Idle from now: a run of another runtime that needs the upper has
	// it discarded; a run of this one takes it (holdUpper).
	hold.Idle(func() {
		s.mu.Lock()
		if s.a != a {
			s.mu.Unlock()
			return // taken or replaced meanwhile
		}
		s.a = nil
		s.mu.Unlock()
		r.discardAheadLater(a)
	})
	return nil
}

// holdUpperAhead holds upper ("": none) for a sandbox built ahead. This
// runtime's own sandbox built ahead on it is discarded first (it is being
// replaced); when a run holds it, nothing is built: the build would wait
// for that run, and the run's end prepares the next one anyway.
func (r *Runtime) holdUpperAhead(upper string) (*uppers.Hold, error) {
	if upper == "" {
		return nil, nil
	}
	s := &r.ahead
	s.mu.Lock()
	old := s.a
	if old != nil && old.upper == upper {
		s.a = nil
		old.hold.Busy()
	} else {
		old = nil
	}
	s.mu.Unlock()
	if old != nil {
		r.discardAhead(old)
	}
	h, _, _, err := r.opts.Uppers.Try(upper, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: %w: %s", sandbox.ErrSetup, uppers.ErrHeld, upper)
	}
	return h, nil
}

// dropAhead discards a, claimed by a run it cannot serve, and returns
// its hold on its upper for that run: with an upper it is gone when
// this returns (the run then mounts its own overlay on it), without one
// it goes in the background.
func (r *Runtime) dropAhead(a *aheadStart) *uppers.Hold {
	if a.hold == nil {
		r.discardAheadLater(a)
		return nil
	}
	h := a.hold
	a.hold = nil
	r.discardAhead(a)
	return h
}

// claimAhead takes the ahead start on the change set upper, if any (""
// for a run without one: no workspace, or a read-only one).
func (r *Runtime) claimAhead(upper string) *aheadStart {
	s := &r.ahead
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.a == nil || s.a.upper != upper {
		return nil
	}
	a := s.a
	s.a = nil
	a.hold.Busy()
	return a
}

// useAhead prepares a, claimed by a run of cfg, for that run and reports
// whether it can serve it; when it cannot, the caller discards it
// (dropAhead).
func (r *Runtime) useAhead(a *aheadStart, cfg *nsinit.Config, lim sandbox.Limits, wantCg bool, sc sandbox.Scratch) bool {
	cfg.LowerFD = r.lowerFD(cfg)
	if a.withCg != wantCg || !bytes.Equal(a.key, aheadKey(cfg)) {
		return false
	}
	select {
	case o := <-a.d.started:
		a.d.started <- o // for discardAhead
		return false     // PID 1 is gone (killed, or its build failed)
	default:
	}
	if a.d.cg != nil && (lim.Memory > 0 || lim.Pids > 0) {
		if err := a.d.cg.setLimits(r.cgl, lim.Memory, lim.Pids); err != nil {
			r.opts.Logger.Debug("sandbox: limits not accepted by an ahead start's cgroup", "err", err)
			return false
		}
	}
	if err := a.d.prog.fillTail(cfg, sc); err != nil {
		r.opts.Logger.Debug("sandbox: an ahead start cannot take the command", "err", err)
		return false
	}
	return true
}

// discardAheadLater discards a in the background (Close waits for it).
func (r *Runtime) discardAheadLater(a *aheadStart) {
	s := &r.ahead
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.discardAhead(a)
	}()
}

// runAhead runs cfg on a, which useAhead prepared.
func (r *Runtime) runAhead(ctx context.Context, a *aheadStart, spec sandbox.Spec, res sandbox.Result, gate func() error, early func(sandbox.Result),
	tr *nsinit.Tracer, stOut *nsinit.Status) (sandbox.Result, error) {
	// Released once the sandbox is gone and its work directory removed.
	defer a.hold.Release()
	defer removeWork(a.work)
	lim := spec.Limits
	var stdin io.Reader
	if spec.Stdin != nil {
		stdin = spec.Stdin
	}
	stdout := newCapWriter(lim.Output, spec.Stdout, spec.Scratch, spec.Live)
	stderr := newCapWriter(lim.Output, spec.Stderr, spec.Scratch, spec.Live)
	a.connect(stdin, stdout, stderr)
	tr.Mark("ahead start taken")
	r.ahead.used.Add(1)
	a.d.start = time.Now()
	return a.d.finish(ctx, res, lim, stdout, stderr, gate, early, tr, stOut)
}

// discardAhead ends an ahead start no run took: PID 1, refused at the
// gate, exits; then what the start holds is released.
func (r *Runtime) discardAhead(a *aheadStart) {
	a.connect(nil, io.Discard, io.Discard)
	a.d.release(releaseStop)
	var o startOutcome
	select {
	case o = <-a.d.started:
	case <-time.After(aheadStopWait):
		// Stopped (SIGSTOP), say, it never reads the verdict.
		r.opts.Logger.Warn("sandbox: a sandbox built ahead did not stop when told; killing it")
		a.d.killPID1()
		o = <-a.d.started
	}
	if o.err == nil {
		// Released after all (cannot happen: it was refused); end it.
		_ = a.d.vp.Signal(unix.SIGKILL)
		_ = a.d.vp.Wait()
	}
	a.d.close()
	removeWork(a.work)
	a.hold.Release()
	r.ahead.discarded.Add(1)
	if a.discarded != nil {
		a.discarded()
	}
}

// aheadStopWait is how long a discarded PID 1 has to exit on its own.
const aheadStopWait = time.Second

// closeAhead discards the ahead start and waits for every discard.
func (r *Runtime) closeAhead() {
	s := &r.ahead
	s.mu.Lock()
	a := s.a
	s.a, s.closed = nil, true
	s.mu.Unlock()
	if a != nil {
		r.discardAhead(a)
	}
	s.wg.Wait()
}

// AheadStats reports how many runs took a sandbox built ahead and how
// many such sandboxes were discarded unused, since New.
func (r *Runtime) AheadStats() (used, discarded int64) {
	return r.ahead.used.Load(), r.ahead.discarded.Load()
}

// late is an io.Writer or io.Reader connected later: an ahead start's
// output is copied from its start and its stdin read from then, the
// request it serves comes later. Writes and reads before connect wait for it. The
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

// ReadFrom lets the connected writer read the pipe itself when it can (a
// capWriter into its own buffer): io.Copy's buffer would otherwise hold
// the output on the heap.
func (l lateWriter) ReadFrom(r io.Reader) (int64, error) {
	w := l.get()
	if rf, ok := w.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w}, r)
}

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

// WriteTo copies the reader connected later as pipedStdin does.
func (l lateReader) WriteTo(w io.Writer) (int64, error) {
	r := l.get()
	if r == nil {
		return 0, nil
	}
	return pipedStdin{r}.WriteTo(w)
}
