package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// sessionBoxes gives each of the kernel's sessions its sandbox runtime:
// a native runtime of the session's own, which keeps the session's next
// sandbox built ahead (nativeBox), or, with a container engine, a
// runtime and a pool of pre-warmed containers of the session's own. A
// sandbox built ahead or a pool belongs to one session: it shows that
// session's workspace and change set and is never handed to another. It
// is a kernel.Revoker: a session that is closed or removed loses its
// sandbox built ahead and its containers at once.
type sessionBoxes struct {
	log *slog.Logger
	// resolve says, once, which runtime sessions use: its name, and the
	// shared runtime (native) or the engine's options (docker, podman).
	resolve func() resolved
	// ups is the registry of the change sets mounted by the sessions'
	// sandboxes, native and container alike: the runtime resolve
	// returns must use it (sessionRuntime), and the containers of image
	// skills and plugins join it. Set before the first session.
	ups *uppers.Registry
	// idle is how long a warm container or a sandbox built ahead waits
	// for a command before it is removed; 0 is the default (5 minutes).
	idle time.Duration
	// sched, when set, gives each command a slot (sessionTools).
	sched *sched.Scheduler
	// slots, when set, bound native commands across the user's
	// processes (hostSlots).
	slots *sched.HostSlots
	// plugins, when set, runs each session's plugin servers, which end
	// with the session's other sandboxes (plugins.go).
	plugins *sessionPlugins
	// skills are the engines of the native sessions' runs of skills
	// with a Dockerfile (skillengine.go), which end with the session.
	skills *skillEngines

	mu      sync.Mutex
	boxes   map[string]*sessionBox
	natives map[string]*nativeBox
	closed  bool
}

// resolved is the runtime sandbox.runtime resolves to: its name, and
// how to make a session's native runtime, a runtime all sessions share,
// or the engine's options (docker, podman); none of them when none is
// usable.
type resolved struct {
	name   string
	native func() (aheadRuntime, error)
	shared sandbox.Runtime
	engine *docker.Options
}

// upperRegistry is the registry of mounted change sets of the sessions'
// sandboxes (ups).
func (s *sessionBoxes) upperRegistry() *uppers.Registry { return s.ups }

// HoldUpper keeps every sandbox of this process off the change set upper
// while the kernel writes it (kernel.Options.HoldUpper): it waits for
// the sandboxes that have it mounted and asks idle ones (started ahead
// of a command, a plugin that yields) to go. Another process that holds
// it is an *uppers.BusyError.
func (s *sessionBoxes) HoldUpper(ctx context.Context, upper string) (func(), error) {
	h, err := s.ups.Acquire(ctx, upper, nil)
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// sessionBox is one session's container runtime and pool.
type sessionBox struct {
	session string
	rt      *docker.Runtime
	mu      sync.Mutex
	pool    *docker.Pool
}

// kernelBoxes are the sandboxes of the kernel's sessions and their
// plugins, which hold the change sets they mount in one registry.
func kernelBoxes(ctx context.Context, u *userenv.Env, log *slog.Logger, db *sql.DB) *sessionBoxes {
	b := sharedBoxes(ctx, u, log)
	b.plugins = kernelPlugins(u, log, db)
	b.plugins.uppers = b.upperRegistry
	return b
}

// sharedBoxes are session boxes on the runtime sessionRuntime resolves,
// whose sandboxes hold the change sets they mount in the boxes' registry.
func sharedBoxes(ctx context.Context, u *userenv.Env, log *slog.Logger) *sessionBoxes {
	ups := uppers.NewRegistry()
	b := newSessionBoxes(log, func() resolved { return sessionRuntime(context.WithoutCancel(ctx), u, log, ups) })
	b.ups = ups
	return b
}

// newSessionBoxes resolves the runtime at the first session, not at
// kernel start (detection starts a probe sandbox).
func newSessionBoxes(log *slog.Logger, resolve func() resolved) *sessionBoxes {
	s := &sessionBoxes{log: log, resolve: sync.OnceValue(resolve), ups: uppers.NewRegistry(), skills: newSkillEngines(), boxes: map[string]*sessionBox{}, natives: map[string]*nativeBox{}}
	s.skills.uppers = s.upperRegistry
	return s
}

// For returns session's runtime and its name; a nil runtime means none
// is usable (shell.exec and test.run are refused). With a container
// engine, warm (non-nil) starts the session's containers ahead from the
// spec its commands will have: call it when a message arrives.
func (s *sessionBoxes) For(ctx context.Context, session string) (rt sandbox.Runtime, name string, warm func(sandbox.Spec), err error) {
	r := s.resolve()
	if r.native != nil {
		b, err := s.native(session, r.native)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", r.name, err)
		}
		return b, r.name, nil, nil
	}
	if r.engine == nil {
		if r.shared == nil {
			return nil, "", nil, nil
		}
		return r.shared, r.name, nil, nil
	}
	name, eng := r.name, r.engine
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, "", nil, errors.New("the kernel is stopping")
	}
	b := s.boxes[session]
	if b == nil {
		o := *eng
		o.Session = session // the containers' label: gc and 'docker ps' name the session
		o.Uppers = s.ups
		drt, err := docker.New(ctx, o)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", name, err)
		}
		b = &sessionBox{session: session, rt: drt}
		s.boxes[session] = b
	}
	return b, name, func(spec sandbox.Spec) { s.warm(b, spec) }, nil
}

// native returns session's native runtime, made with newRT at its first
// command.
func (s *sessionBoxes) native(session string, newRT func() (aheadRuntime, error)) (*nativeBox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the kernel is stopping")
	}
	b := s.natives[session]
	if b == nil {
		var err error
		if b, err = newNativeBox(s.log, s.idle, newRT); err != nil {
			return nil, err
		}
		if s.sched != nil {
			b.warm = warmSlots{s: s.sched, session: session, res: sched.Sandboxes}
		}
		s.natives[session] = b
	}
	return b, nil
}

// warm starts b's containers ahead for spec in the background; a pool of
// another shape (the configuration changed) is replaced.
func (s *sessionBoxes) warm(b *sessionBox, spec sandbox.Spec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rt == nil {
		return // the session ended meanwhile
	}
	if b.pool != nil && !docker.SameContainer(b.pool.Spec(), spec) {
		go b.pool.Close()
		b.pool = nil
	}
	if b.pool == nil {
		o := docker.PoolOptions{Starter: b.rt, Spec: spec, IdleTimeout: s.idle}
		if s.sched != nil {
			o.Slots = warmSlots{s: s.sched, session: b.session, res: sched.Containers}
		}
		p, err := docker.NewPool(o)
		if err != nil {
			s.log.Warn("no pre-warmed containers", "err", err)
			return
		}
		b.pool = p
	}
	b.pool.Prewarm()
}

// Run runs spec in one of the session's pre-warmed containers, or in a
// fresh one when none is warm or spec needs another shape.
func (b *sessionBox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	b.mu.Lock()
	p, rt := b.pool, b.rt
	b.mu.Unlock()
	switch {
	case rt == nil:
		return sandbox.Result{}, fmt.Errorf("%w: the session has ended", sandbox.ErrSetup)
	case p == nil:
		return rt.Run(ctx, spec)
	}
	return p.Run(ctx, spec)
}

// close removes the session's containers and releases its engine client.
func (b *sessionBox) close() error {
	b.mu.Lock()
	p, rt := b.pool, b.rt
	b.pool, b.rt = nil, nil
	b.mu.Unlock()
	var err error
	if p != nil {
		err = p.Close()
	}
	if rt != nil {
		err = errors.Join(err, rt.Close())
	}
	return err
}

// EndSession removes the session's sandbox built ahead and its
// containers (kernel.Revoker).
func (s *sessionBoxes) EndSession(session string) {
	s.mu.Lock()
	b, nb := s.boxes[session], s.natives[session]
	delete(s.boxes, session)
	delete(s.natives, session)
	s.mu.Unlock()
	if s.plugins != nil {
		s.plugins.EndSession(session)
	}
	s.skills.EndSession(session)
	if nb != nil {
		if err := nb.close(); err != nil {
			s.log.Warn("discarding the session's sandbox built ahead", "session", session, "err", err)
		}
	}
	if b != nil {
		if err := b.close(); err != nil {
			s.log.Warn("removing the session's containers", "session", session, "err", err)
		}
	}
}

// IdleSession lets an open session's sandbox built ahead, containers,
// plugin servers and skill engine go when the kernel drops its idle
// router (kernel.Idler): each is started again at its next call, while
// its change set stays for review.
func (s *sessionBoxes) IdleSession(session string) { s.EndSession(session) }

// Close removes every session's sandbox built ahead and containers; For
// fails afterwards.
func (s *sessionBoxes) Close() {
	s.mu.Lock()
	boxes, natives := s.boxes, s.natives
	s.boxes, s.natives, s.closed = map[string]*sessionBox{}, map[string]*nativeBox{}, true
	s.mu.Unlock()
	if s.plugins != nil {
		s.plugins.Close()
	}
	s.skills.Close()
	for id, b := range natives {
		if err := b.close(); err != nil {
			s.log.Warn("discarding the session's sandbox built ahead", "session", id, "err", err)
		}
	}
	for id, b := range boxes {
		if err := b.close(); err != nil {
			s.log.Warn("removing the session's containers", "session", id, "err", err)
		}
	}
}

// warmSlots lend a session's pre-warmed containers the scheduler's
// container slots, and its native sandbox built ahead a sandbox slot:
// each is a Warm task of its session, so that a command waiting for a
// slot (of any session) has an idle one destroyed rather than waiting
// for a running one (docs/sched.md#preemption).
type warmSlots struct {
	s       *sched.Scheduler
	session string
	res     sched.Resource
}

func (w warmSlots) lease() (*sched.Lease, error) {
	label := "pre-warmed container"
	if w.res == sched.Sandboxes {
		label = "sandbox built ahead"
	}
	return w.s.TryAcquire(sched.Task{Class: sched.Background, Session: w.session, Label: label,
		Inner: true, Warm: true, Needs: map[sched.Resource]int64{w.res: 1}})
}

func (w warmSlots) TryWarm() (docker.WarmSlot, error) {
	l, err := w.lease()
	if err != nil || l == nil {
		return nil, err
	}
	return warmLease{l}, nil
}

// warmLease is a pre-warmed container's task.
type warmLease struct{ *sched.Lease }

func (l warmLease) Evict() <-chan struct{} { return l.Preempted() }
