package wiring

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/cron"
	"github.com/fluffy-agent/fluffy/internal/channel/terminal"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// newScheduler is the kernel's scheduler with the limits of sched:
// (docs/sched.md): model calls per provider, sandboxes, containers,
// memory, the daemon's turns overall and per session.
func newScheduler(c config.Sched, log *slog.Logger) (*sched.Scheduler, error) {
	l := sched.Limits{Global: c.Global, PerSession: c.PerSession, Resources: map[sched.Resource]int64{}}
	if c.ModelCalls > 0 {
		for _, p := range catalog.Providers() {
			l.Resources[sched.Model(p.Name)] = int64(c.ModelCalls)
		}
	}
	for r, n := range map[sched.Resource]int64{sched.Sandboxes: int64(c.Sandboxes), sched.Containers: int64(c.Containers), sched.Memory: int64(c.Memory)} {
		if n > 0 {
			l.Resources[r] = n
		}
	}
	return sched.New(sched.Options{Limits: l, Aging: c.Aging.Std(), Logger: log.With("subsystem", "sched")})
}

// turnClass is the priority class of a conversation's turns: the
// person's terminal is interactive, the heartbeat background, every
// other event (a webhook, a mail, a cron job) triggered.
func turnClass(conv channel.Conversation) sched.Class {
	switch {
	case conv.Channel == terminal.Name:
		return sched.Interactive
	case conv.Channel == cron.Name && conv.Room == cron.HeartbeatJob:
		return sched.Background
	}
	return sched.Triggered
}

// admitTurn is the daemon's serve.Options.Admit: each turn is a task of
// its conversation's class, owned by its session, and its context
// carries the lease so the turn's model calls and commands are its inner
// work.
func admitTurn(s *sched.Scheduler) func(ctx context.Context, conv channel.Conversation, session string) (context.Context, func(), error) {
	return func(ctx context.Context, conv channel.Conversation, session string) (context.Context, func(), error) {
		l, err := s.Acquire(ctx, sched.Task{Class: turnClass(conv), Session: session, Label: "turn: " + conv.Channel})
		if err != nil {
			return nil, nil, err
		}
		return sched.WithLease(ctx, l), l.Release, nil
	}
}

// inner is a task of work done under ctx: of the class and session of
// the turn ctx belongs to; interactive outside a daemon's turn (a
// terminal runs the session).
func inner(ctx context.Context, session, label string, needs map[sched.Resource]int64) sched.Task {
	t := sched.Task{Class: sched.Interactive, Session: session, Label: label, Inner: true, Needs: needs}
	if l, ok := sched.LeaseFrom(ctx); ok {
		o := l.Task()
		t.Class, t.Session = o.Class, o.Session
	}
	return t
}

// safePoint is where a turn asked to pause gives its slot up: between
// tool calls and before a model call, where nothing of it is in flight.
func safePoint(ctx context.Context) error {
	if l, ok := sched.LeaseFrom(ctx); ok {
		return l.Yield(ctx)
	}
	return nil
}

// schedProvider holds its provider's model-call slot for each call.
type schedProvider struct {
	p   llm.Provider
	s   *sched.Scheduler
	res sched.Resource
}

func scheduledModels(s *sched.Scheduler, open func(ctx context.Context, model string) (llm.Provider, string, error)) func(ctx context.Context, model string) (llm.Provider, string, error) {
	return func(ctx context.Context, model string) (llm.Provider, string, error) {
		p, name, err := open(ctx, model)
		if err != nil {
			return p, name, err
		}
		prov, _, _ := strings.Cut(model, "/")
		sp := schedProvider{p: p, s: s, res: sched.Model(prov)}
		if r, ok := p.(resumer); ok {
			// A scripted model keeps its position in the conversation:
			// the kernel must still reach it through the wrapper.
			return schedResumer{schedProvider: sp, r: r}, name, nil
		}
		return sp, name, nil
	}
}

// resumer is a model that keeps its own position in a conversation (the
// kernel's resumer: replay.Provider).
type resumer interface {
	Resume(history []llm.Message) error
}

// schedResumer is a schedProvider over a resumer.
type schedResumer struct {
	schedProvider
	r resumer
}

func (p schedResumer) Resume(history []llm.Message) error { return p.r.Resume(history) }

func (p schedProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		if err := safePoint(ctx); err != nil {
			yield(llm.Event{}, err)
			return
		}
		l, err := p.s.Acquire(ctx, inner(ctx, "", "model call", map[sched.Resource]int64{p.res: 1}))
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		defer l.Release()
		for ev, err := range p.p.Stream(ctx, req) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// schedTools makes each tool call a safe point of its turn.
type schedTools struct{ agent.Tools }

func (t schedTools) Call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	if err := safePoint(ctx); err != nil {
		return agent.Result{}, err
	}
	return t.Tools.Call(ctx, c)
}

// schedRuntime holds a sandbox slot (a container's for the container
// runtimes) and the command's memory limit while a command runs. It keeps
// the runtime's ability to build the sandbox while the call's records
// are written (sandbox.GatedRunner).
type schedRuntime struct {
	rt      sandbox.Runtime
	s       *sched.Scheduler
	session string
	res     sched.Resource
	// slots, when set, bound sandboxes across the user's processes: a
	// native command also holds one of them (hostSlots).
	slots *sched.HostSlots
}

var _ sandbox.GatedRunner = schedRuntime{}

func scheduledRuntime(rt sandbox.Runtime, s *sched.Scheduler, slots *sched.HostSlots, session, name string) sandbox.Runtime {
	if rt == nil || s == nil {
		return rt
	}
	res := sched.Sandboxes
	if name == "docker" || name == "podman" {
		res, slots = sched.Containers, nil
	}
	return schedRuntime{rt: rt, s: s, session: session, res: res, slots: slots}
}

// hostSlots are the sched.sandboxes slots the kernel, the sandbox server
// and 'fluffy sandbox run' in its own process share (docs/sched.md);
// nil when sched.sandboxes is 0 (no limit).
func hostSlots(u *userenv.Env, c config.Sched) (*sched.HostSlots, error) {
	if c.Sandboxes <= 0 {
		return nil, nil
	}
	d, err := u.DataDir()
	if err != nil {
		return nil, err
	}
	return sched.OpenHostSlots(d.Path("run", "sandbox-slots"), c.Sandboxes)
}

// slotRuntime holds a host slot while each run of its runtime runs: the
// runs of the sandbox server and of 'fluffy sandbox run' in its own
// process, which the kernel's scheduler does not see. It keeps the
// runtime's ahead start.
type slotRuntime struct {
	sandboxrun.AheadRuntime
	slots *sched.HostSlots
}

var (
	_ sandbox.EarlyRunner = slotRuntime{}
	_ sandbox.GatedRunner = slotRuntime{}
)

func (r slotRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return r.RunEarly(ctx, spec, nil, nil)
}

func (r slotRuntime) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	return r.RunEarly(ctx, spec, gate, nil)
}

// RunEarly holds a slot for the whole run, the sandbox's tear-down
// included, and passes gate and early on to the runtime when it takes
// them (sandbox.Observe records through them).
func (r slotRuntime) RunEarly(ctx context.Context, spec sandbox.Spec, gate func() error, early func(sandbox.Result)) (sandbox.Result, error) {
	release, err := r.slots.Acquire(ctx)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	defer release()
	rt := sandbox.Runtime(r.AheadRuntime)
	if a, ok := rt.(aheadless); ok {
		rt = a.Runtime
	}
	er, isEarly := rt.(sandbox.EarlyRunner)
	gr, isGated := rt.(sandbox.GatedRunner)
	switch {
	case gate == nil && early == nil:
		return rt.Run(ctx, spec)
	case isEarly && early != nil:
		return er.RunEarly(ctx, spec, orNoGate(gate), early)
	case isGated:
		return gr.RunGated(ctx, spec, orNoGate(gate))
	}
	if gate != nil {
		if err := gate(); err != nil {
			return sandbox.Result{}, err
		}
	}
	return rt.Run(ctx, spec)
}

func orNoGate(gate func() error) func() error {
	if gate == nil {
		return func() error { return nil }
	}
	return gate
}

// slotPlain is slotRuntime for a runtime without ahead starts.
func slotPlain(rt sandbox.Runtime, slots *sched.HostSlots) slotRuntime {
	return slotRuntime{AheadRuntime: aheadless{rt}, slots: slots}
}

// aheadless is a runtime as a sandboxrun.AheadRuntime that builds
// nothing ahead.
type aheadless struct{ sandbox.Runtime }

func (aheadless) PrepareNext(sandbox.Spec, func()) error { return nil }
func (aheadless) SweepStale() (int, error)               { return 0, nil }
func (aheadless) Close() error                           { return nil }

// acquire takes the command's task and, for a native command, a host
// slot; the returned func gives both back.
func (r schedRuntime) acquire(ctx context.Context, spec sandbox.Spec) (func(), error) {
	l, err := r.lease(ctx, spec)
	if err != nil {
		return nil, err
	}
	if r.slots == nil {
		return l.Release, nil
	}
	release, err := r.slots.Acquire(ctx)
	if err != nil {
		l.Release()
		return nil, err
	}
	return func() {
		release()
		l.Release()
	}, nil
}

func (r schedRuntime) lease(ctx context.Context, spec sandbox.Spec) (*sched.Lease, error) {
	needs := map[sched.Resource]int64{r.res: 1}
	if m := spec.Limits.Memory; m > 0 {
		needs[sched.Memory] = m
	}
	l, err := r.s.Acquire(ctx, inner(ctx, r.session, "command", needs))
	if errors.Is(err, sched.ErrExceedsLimit) {
		// A command whose memory limit is above sched.memory runs
		// counted as the whole of it.
		needs[sched.Memory] = r.s.Status().Limits[string(sched.Memory)]
		l, err = r.s.Acquire(ctx, inner(ctx, r.session, "command", needs))
	}
	return l, err
}

func (r schedRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	release, err := r.acquire(ctx, spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer release()
	return r.rt.Run(ctx, spec)
}

func (r schedRuntime) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	release, err := r.acquire(ctx, spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer release()
	if gr, ok := r.rt.(sandbox.GatedRunner); ok {
		return gr.RunGated(ctx, spec, gate)
	}
	if err := gate(); err != nil {
		return sandbox.Result{}, err
	}
	return r.rt.Run(ctx, spec)
}

// registerSched serves "sched.status" (docs/ipc.md).
func registerSched(mux *ipc.Mux, s *sched.Scheduler) error {
	return mux.Handle(sched.MethodStatus, func(context.Context, *ipc.Request) (any, error) {
		return s.Status(), nil
	})
}

// expirer removes old sessions (*kernel.Kernel).
type expirer interface {
	Expire(ctx context.Context, before time.Time) (kernel.ExpireResult, error)
}

// startRetention runs the sessions.retention sweep (docs/sched.md#retention)
// as a background task of the scheduler: at start, then every tenth of
// the retention (at least a minute, at most an hour). keep 0 runs none.
// The returned func stops it and waits for a sweep in progress.
func startRetention(ctx context.Context, k expirer, s *sched.Scheduler, keep time.Duration, log *slog.Logger) func() {
	if keep <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	every := min(max(keep/10, time.Minute), time.Hour)
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := sweepSessions(ctx, k, s, keep, time.Now, log); err != nil && ctx.Err() == nil {
				log.Error("session retention", "err", err)
			}
			t.Reset(every)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// sweepSessions is one retention pass, run as a background task: it
// waits behind interactive and triggered work.
func sweepSessions(ctx context.Context, k expirer, s *sched.Scheduler, keep time.Duration, now func() time.Time, log *slog.Logger) error {
	l, err := s.Acquire(ctx, sched.Task{Class: sched.Background, Label: "session retention"})
	if err != nil {
		return err
	}
	defer l.Release()
	res, err := k.Expire(ctx, now().Add(-keep))
	if len(res.Removed) > 0 || len(res.Kept) > 0 {
		log.Info("sessions past their retention", "removed", len(res.Removed), "kept", len(res.Kept), "retention", keep)
	}
	return err
}
