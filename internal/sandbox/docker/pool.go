package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Starter starts the containers (a *Runtime); required.
	Starter sandbox.Starter
	// Spec is the session's sandbox (workspace, change set, template
	// settings, limits, environment); its Argv is ignored. Containers of
	// a pool are never shared with another session.
	Spec sandbox.Spec
	// Size is how many idle containers Warm prepares; 0 means 1.
	Size int
	// Max bounds the containers alive at once (idle and busy); 0 means
	// Size+1. Exec waits for a free slot beyond it.
	Max int
	// IdleTimeout closes containers idle longer than this; 0 means 5
	// minutes.
	IdleTimeout time.Duration
	// Slots, when set, counts each idle container against the daemon's
	// container limit while it waits for a command: Warm starts a
	// container only when Slots has one free, and a container whose slot
	// is wanted for a command is destroyed. A container taken by a
	// command gives its slot back: the command holds its own.
	Slots WarmSlots
}

// WarmSlots lends slots to pre-warmed containers (internal/wiring: a
// Warm task of internal/sched for each).
type WarmSlots interface {
	// TryWarm takes a slot for one container started ahead of need, or
	// returns nil when none is free now.
	TryWarm() (WarmSlot, error)
}

// WarmSlot is one pre-warmed container's slot.
type WarmSlot interface {
	// Evict is closed when the slot is wanted for other work: the pool
	// then destroys the container, unless a command took it already.
	Evict() <-chan struct{}
	// Release gives the slot back.
	Release()
}

// Pool keeps pre-warmed containers for one session: Warm starts them
// ahead of need, Exec runs a command in an idle one (starting one when
// none is idle, within Max), and containers idle longer than IdleTimeout
// are destroyed. Call Warm again when the next message arrives.
//
// Run (sandbox.Runtime) is the session's way in: each command takes a
// warm container of its own, which is destroyed when the command returns,
// and a replacement is warmed in the background.
type Pool struct {
	opts   PoolOptions
	slots  chan struct{} // one token per live container
	mu     sync.Mutex
	idle   []*pooled
	closed bool
	// warmed is open while a background Prewarm runs, closed when it
	// ends: a command that finds no idle container waits for it rather
	// than starting a second one.
	warmed chan struct{}
	stop   chan struct{}
	// bg is the background warms' context, cancelled by Close.
	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type pooled struct {
	inst  sandbox.Instance
	since time.Time
	// slot is its WarmSlot (nil without PoolOptions.Slots); gone is
	// closed when it leaves the idle list, whoever takes it out.
	slot WarmSlot
	gone chan struct{}
}

// leave ends its time as an idle container: it was taken out of p.idle
// under p.mu by the caller.
func (it *pooled) leave() {
	close(it.gone)
	if it.slot != nil {
		it.slot.Release()
	}
}

// NewPool returns a pool and starts its idle reaper; it starts no
// container until Warm or Exec.
func NewPool(opts PoolOptions) (*Pool, error) {
	if opts.Starter == nil {
		return nil, errors.New("docker: pool: no Starter")
	}
	if opts.Size <= 0 {
		opts.Size = 1
	}
	if opts.Max <= 0 {
		opts.Max = opts.Size + 1
	}
	if opts.Size > opts.Max {
		opts.Size = opts.Max
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	p := &Pool{opts: opts, slots: make(chan struct{}, opts.Max), stop: make(chan struct{})}
	p.bg, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.reaper()
	return p, nil
}

// Warm starts containers until Size are idle (within Max). It returns
// the first start error.
func (p *Pool) Warm(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.opts.Size {
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		select {
		case p.slots <- struct{}{}:
		default:
			return nil // at Max: the busy ones come back idle
		}
		var slot WarmSlot
		if p.opts.Slots != nil {
			var err error
			if slot, err = p.opts.Slots.TryWarm(); err != nil || slot == nil {
				<-p.slots
				return err // nil: the daemon's containers are all in use
			}
		}
		inst, err := p.startAhead(ctx)
		if err != nil {
			<-p.slots
			if slot != nil {
				slot.Release()
			}
			if errors.Is(err, uppers.ErrHeld) {
				return nil // one container waits on the change set already
			}
			return err
		}
		p.putWarm(inst, slot)
	}
}

// aheadStarter is a Starter that can start a container ahead of its
// command (*Runtime.startAhead).
type aheadStarter interface {
	startAhead(context.Context, sandbox.Spec) (sandbox.Instance, error)
}

// startAhead starts a container to wait for a command. Only one
// container may have the change set mounted at a time (package uppers):
// one already waiting on it is not evicted for another (uppers.ErrHeld).
func (p *Pool) startAhead(ctx context.Context) (sandbox.Instance, error) {
	if a, ok := p.opts.Starter.(aheadStarter); ok {
		return a.startAhead(ctx, p.opts.Spec)
	}
	return p.opts.Starter.Start(ctx, p.opts.Spec)
}

// Prewarm runs Warm in the background, unless one already runs or the
// pool is closed; a start error is logged by the caller's Starter only,
// and the next command starts its own container.
func (p *Pool) Prewarm() {
	p.mu.Lock()
	if p.closed || p.warmed != nil {
		p.mu.Unlock()
		return
	}
	done := make(chan struct{})
	p.warmed = done
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		_ = p.Warm(p.bg)
		p.mu.Lock()
		p.warmed = nil
		p.mu.Unlock()
		close(done)
	}()
}

// Run runs spec's command in a container of its own and destroys the
// container before it returns, as Runtime.Run does; the pool only moves
// the container's start ahead of the command. When spec needs another
// container than the pool's (SameContainer), or the Starter cannot run a
// command in one of its containers with the command's own settings, it is
// the Starter's cold Run. Either way a replacement is warmed in the
// background.
//
// A container is never used for a second command: what a command leaves
// behind (files in /tmp, processes) would otherwise reach the next one,
// and a process left running could write to the change set after Run
// returned.
func (p *Pool) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	defer p.Prewarm()
	cold, ok := p.opts.Starter.(sandbox.Runtime)
	if !SameContainer(p.opts.Spec, spec) {
		if !ok {
			return sandbox.Result{}, fmt.Errorf("%w: the pool's starter cannot run a command of another shape", sandbox.ErrSetup)
		}
		return cold.Run(ctx, spec)
	}
	if err := spec.Validate(); err != nil {
		return sandbox.Result{}, err
	}
	t0 := time.Now()
	inst, err := p.get(ctx)
	if err != nil {
		return sandbox.Result{}, err
	}
	in, ok := inst.(runStopper)
	if !ok {
		p.discard(inst)
		return sandbox.Result{}, fmt.Errorf("%w: the pool's containers cannot run a spec", sandbox.ErrSetup)
	}
	res, err := in.Run(ctx, spec)
	res.Setup += time.Since(t0) - res.Duration - res.Setup
	// Nothing the command started may run once Run has returned (it
	// could write to the change set behind the caller's back): the
	// container is stopped now; its removal, which takes longer, goes on
	// in the background (Close waits for it).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_, sp := telemetry.StartChild(sctx, telemetry.SpanContainerStop, trace.SpanKindClient, stopAttrs(inst)...)
	serr := in.Stop(sctx)
	sp.Fail(serr)
	sp.End()
	cancel()
	if serr != nil {
		p.discard(inst)
		if err == nil {
			err = fmt.Errorf("%w: %w", sandbox.ErrSetup, serr)
		}
		return res, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(inst)
		return res, err
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.discard(inst)
	}()
	return res, err
}

// stopAttrs are the stop span's attributes of a pool's container.
func stopAttrs(inst sandbox.Instance) []attribute.KeyValue {
	if in, ok := inst.(*Instance); ok {
		return in.r.spanAttrs(in.id)
	}
	return nil
}

// runStopper is what Run needs of a pool's container (*Instance).
type runStopper interface {
	Run(context.Context, sandbox.Spec) (sandbox.Result, error)
	Stop(context.Context) error
}

// Idle returns the number of idle containers.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Exec runs argv in an idle container, or in a new one when none is idle.
// A container the command's wall-clock limit killed is discarded.
func (p *Pool) Exec(ctx context.Context, argv []string) (sandbox.Result, error) {
	inst, err := p.get(ctx)
	if err != nil {
		return sandbox.Result{}, err
	}
	res, err := inst.Exec(ctx, argv)
	if err != nil || res.Killed == sandbox.LimitTime || ctx.Err() != nil {
		p.discard(inst)
		return res, err
	}
	p.put(inst)
	return res, nil
}

func (p *Pool) get(ctx context.Context) (sandbox.Instance, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: the pool is closed", sandbox.ErrSetup)
		}
		if n := len(p.idle); n > 0 {
			it := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			it.leave()
			if in, ok := it.inst.(*Instance); ok {
				in.hold.Busy()
			}
			return it.inst, nil
		}
		warmed := p.warmed
		p.mu.Unlock()
		if warmed == nil {
			break
		}
		// A container is being started ahead: it is nearer to ready
		// than a new one would be.
		select {
		case <-warmed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for a free container: %w", sandbox.ErrSetup, ctx.Err())
		}
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a free container: %w", sandbox.ErrSetup, ctx.Err())
	}
	inst, err := p.opts.Starter.Start(ctx, p.opts.Spec)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return inst, nil
}

func (p *Pool) put(inst sandbox.Instance) { p.putWarm(inst, nil) }

// putWarm adds inst to the idle list with its slot; while it is idle, a
// call for its slot (WarmSlot.Evict) destroys it.
func (p *Pool) putWarm(inst sandbox.Instance, slot WarmSlot) {
	it := &pooled{inst: inst, since: time.Now(), slot: slot, gone: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		it.leave()
		p.discard(inst)
		return
	}
	p.idle = append(p.idle, it)
	if slot != nil {
		p.wg.Add(1)
		go p.evictOnCall(it)
	}
	p.mu.Unlock()
	if in, ok := inst.(*Instance); ok {
		// Idle, it gives its change set up to a sandbox that needs it
		// (a command of another shape, another runtime's sandbox).
		in.hold.Idle(func() { p.evictIdle(it) })
	}
}

// evictIdle destroys idle container it, in the background, when another
// sandbox needs its change set; nothing when a command took it already.
func (p *Pool) evictIdle(it *pooled) {
	p.mu.Lock()
	i := slices.Index(p.idle, it)
	if i < 0 || p.closed {
		p.mu.Unlock()
		return // a command, the reaper or Close took it
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.discard(it.inst)
		it.leave()
	}()
}

// evictOnCall destroys idle container it when its slot is called for.
func (p *Pool) evictOnCall(it *pooled) {
	defer p.wg.Done()
	select {
	case <-it.gone:
		return
	case <-p.stop:
		return
	case <-it.slot.Evict():
	}
	p.mu.Lock()
	i := slices.Index(p.idle, it)
	if i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
	}
	p.mu.Unlock()
	if i < 0 {
		return // a command, the reaper or Close took it
	}
	// The slot goes back once the container is gone, so the count never
	// shows fewer containers than are alive.
	_ = it.inst.Close()
	<-p.slots
	close(it.gone)
	it.slot.Release()
}

func (p *Pool) discard(inst sandbox.Instance) {
	_ = inst.Close()
	<-p.slots
}

func (p *Pool) reaper() {
	defer p.wg.Done()
	tick := time.NewTicker(max(p.opts.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-tick.C:
			p.mu.Lock()
			var keep, old []*pooled
			for _, it := range p.idle {
				if now.Sub(it.since) > p.opts.IdleTimeout {
					old = append(old, it)
				} else {
					keep = append(keep, it)
				}
			}
			p.idle = keep
			p.mu.Unlock()
			for _, it := range old {
				p.discard(it.inst)
				it.leave()
			}
		}
	}
}

// Close destroys every idle container and stops the reaper; busy ones are
// destroyed when their command returns.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	close(p.stop)
	p.cancel()
	p.wg.Wait()
	var errs []error
	for _, it := range idle {
		errs = append(errs, it.inst.Close())
		<-p.slots
		it.leave()
	}
	return errors.Join(errs...)
}

// Spec is the spec the pool's containers start from.
func (p *Pool) Spec() sandbox.Spec { return p.opts.Spec }
