package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sched"
)

// aheadRuntime is a runtime that builds the next sandbox ahead of its
// request (native.Runtime.PrepareNext): it holds one such sandbox, which
// the next run of the same shape takes and any other run leaves or
// discards; Close discards it.
type aheadRuntime interface {
	sandbox.GatedRunner
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
	PrepareNext(spec sandbox.Spec, discarded func()) error
	Close() error
}

// aheadIdle is how long a session's sandbox built ahead waits for its
// command before it is discarded, when sessionBoxes.idle is 0 (the
// container pool's default).
const aheadIdle = 5 * time.Minute

// nativeBox is one session's native runtime: after each sandboxed
// command it builds the next sandbox of that command's shape (template,
// workspace, change set, mounts, masks, limits, seccomp: everything but
// argv, environment and rlimits), which the session's next command takes
// when its own spec has that shape; otherwise the runtime discards it
// and builds one on demand, so a sandbox built ahead is exactly the one
// the command would have had (a policy or mask change between the two
// is a different shape). The runtime, and with it its sandbox built
// ahead, belongs to this session alone. It is discarded after idle
// without a command and when the session ends.
type nativeBox struct {
	log   *slog.Logger
	idle  time.Duration
	newRT func() (aheadRuntime, error)
	// warm, when set, gives the sandbox built ahead a sandbox slot of the
	// scheduler as a Warm task: nothing is built ahead without a free
	// slot, and a command waiting for one has it discarded.
	warm interface{ lease() (*sched.Lease, error) }

	mu      sync.Mutex
	cur     *boxRuntime // nil once the session has ended
	running int
	timer   *time.Timer
	ahead   *warmAhead // the slot of the sandbox built ahead, if any
}

// boxRuntime is a runtime and the sandboxes being built ahead on it,
// which its Close waits for.
type boxRuntime struct {
	rt      aheadRuntime
	prepare sync.WaitGroup
}

func newNativeBox(log *slog.Logger, idle time.Duration, newRT func() (aheadRuntime, error)) (*nativeBox, error) {
	rt, err := newRT()
	if err != nil {
		return nil, err
	}
	if idle <= 0 {
		idle = aheadIdle
	}
	return &nativeBox{log: log, idle: idle, newRT: newRT, cur: &boxRuntime{rt: rt}}, nil
}

var _ sandbox.GatedRunner = (*nativeBox)(nil)

// Run implements sandbox.Runtime.
func (b *nativeBox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return b.RunGated(ctx, spec, nil)
}

// RunGated implements sandbox.GatedRunner: the command runs in the
// sandbox built ahead when it has its shape, and the next one is built
// once it has ended.
func (b *nativeBox) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	b.mu.Lock()
	cur := b.cur
	if cur == nil {
		b.mu.Unlock()
		return sandbox.Result{}, fmt.Errorf("%w: the session has ended", sandbox.ErrSetup)
	}
	b.running++
	if b.timer != nil {
		b.timer.Stop()
	}
	ahead := b.ahead
	b.ahead = nil
	b.mu.Unlock()
	// The command holds a slot of its own (schedRuntime): the sandbox
	// built ahead, which it takes or has discarded, gives its slot back.
	ahead.release()
	res, err := cur.rt.RunGated(ctx, spec, gate)
	b.mu.Lock()
	b.running--
	if b.cur == cur {
		cur.prepare.Add(1)
		go b.prepareNext(cur, spec)
	}
	b.mu.Unlock()
	return res, err
}

// prepareNext builds a sandbox ahead for the next command like spec
// (off the caller's path: the command's result is already on its way),
// then starts the idle timer when no command is running.
func (b *nativeBox) prepareNext(cur *boxRuntime, spec sandbox.Spec) {
	defer cur.prepare.Done()
	spec = aheadSpec(spec)
	var w *warmAhead
	if b.warm != nil {
		l, err := b.warm.lease()
		if err != nil || l == nil {
			b.log.Debug("sandbox: nothing built ahead for the session: no sandbox slot free", "err", err)
			return
		}
		w = &warmAhead{l: l, done: make(chan struct{})}
	}
	if err := cur.rt.PrepareNext(spec, w.release); err != nil {
		w.release()
		b.log.Debug("sandbox: nothing built ahead for the session", "err", err)
		return
	}
	if w != nil {
		go b.evictOnCall(cur, w)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ahead.release() // replaced by this one
	b.ahead = w
	if b.cur != cur || b.running > 0 {
		return
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, b.expire)
	} else {
		b.timer.Reset(b.idle)
	}
}

// warmAhead is the Warm task of a sandbox built ahead.
type warmAhead struct {
	l    *sched.Lease
	once sync.Once
	done chan struct{}
}

// release gives the slot back, once (nil: none held).
func (w *warmAhead) release() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		w.l.Release()
		close(w.done)
	})
}

// evictOnCall discards the sandbox built ahead on cur when the scheduler
// wants its slot for a command (of any session).
func (b *nativeBox) evictOnCall(cur *boxRuntime, w *warmAhead) {
	select {
	case <-w.done:
		return
	case <-w.l.Preempted():
	}
	b.mu.Lock()
	if b.cur != cur || b.ahead != w || b.running > 0 {
		// Taken or replaced meanwhile; with a command of the session
		// running, that command's end builds the next one and this one
		// goes when it is taken or replaced.
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.expire()
}

// expire discards the sandbox built ahead of a session that has been
// idle: the runtime holding it is replaced by a new one and closed.
func (b *nativeBox) expire() {
	b.mu.Lock()
	if b.cur == nil || b.running > 0 {
		b.mu.Unlock()
		return
	}
	rt, err := b.newRT()
	if err != nil {
		b.mu.Unlock()
		b.log.Warn("sandbox: a session's sandbox built ahead is kept past its idle timeout", "err", err)
		return
	}
	old := b.cur
	b.cur = &boxRuntime{rt: rt}
	b.mu.Unlock()
	if err := old.close(); err != nil {
		b.log.Warn("sandbox: discarding a session's sandbox built ahead", "err", err)
	}
}

// close waits for the sandboxes being built ahead on r and discards them.
func (r *boxRuntime) close() error {
	r.prepare.Wait()
	return r.rt.Close()
}

// close discards the session's sandbox built ahead; its commands fail
// afterwards.
func (b *nativeBox) close() error {
	b.mu.Lock()
	cur := b.cur
	b.cur = nil
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	if cur == nil {
		return nil
	}
	return cur.close()
}

// aheadSpec is what a sandbox built ahead after a command of spec is
// built with: spec without what was the command's alone (its command
// line, environment, stdio, arena, and the folder of its secret files,
// which is removed when it ends: a sandbox built with it would fail, or
// wait for a command that never comes).
func aheadSpec(spec sandbox.Spec) sandbox.Spec {
	spec.Argv, spec.Env, spec.Stdin, spec.Stdout, spec.Stderr, spec.Scratch = nil, nil, nil, nil, nil, nil
	spec.Mounts = slices.DeleteFunc(slices.Clone(spec.Mounts), func(m sandbox.Mount) bool { return m.Target == SecretsMount })
	return spec
}
