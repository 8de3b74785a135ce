package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultAging is a class's head start over the next class when
// Options.Aging is zero: background work that has waited 2×DefaultAging
// goes before interactive work that arrives after that.
const DefaultAging = 30 * time.Second

// errEndedUnstarted is the error of a task ended before it started
// without a cause of its own.
var errEndedUnstarted = errors.New("sched: the task ended before it started")

// remembered is how many ended tasks' outcomes the scheduler keeps for
// After edges submitted later.
const remembered = 4096

// Limits bound what runs at once. Zero means no limit.
type Limits struct {
	// Global bounds the running tasks that are not Inner.
	Global int
	// PerSession bounds one session's running tasks that are not Inner.
	PerSession int
	// Resources bounds each resource's amount held by running tasks; a
	// resource absent here is not counted.
	Resources map[Resource]int64
}

// Options configure a Scheduler.
type Options struct {
	Limits Limits
	// Aging is each class's head start over the next (DefaultAging when
	// zero): a task's place in the queue is the time it became ready plus
	// its class times Aging, so a task is never passed by work of any
	// class that became ready more than Aging×class after it.
	Aging time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

type state uint8

const (
	stBlocked state = iota // waiting for dependencies
	stQueued               // in its group's queue, or parked behind its session's limit
	stRunning
	stEnded
)

// entry is a task inside the scheduler. Every field is guarded by
// Scheduler.mu.
type entry struct {
	t     Task
	seq   uint64
	key   int64 // ready time + class×aging, in nanoseconds
	state state
	group *group
	q     *queue // the queue holding it (group or parked), nil otherwise
	idx   int

	pending    int // dependencies not yet ended
	dependents []*entry

	submitted, ready, started time.Time
	// wake is closed when the task starts or fails; a paused task gets a
	// new one.
	wake chan struct{}
	err  error // why it will never start
	// preempt is closed when the scheduler asks the running task to
	// pause; asked records that it did.
	preempt chan struct{}
	asked   bool
}

// group holds the queued tasks that need the same limited resources and
// count alike against the global limit: within a group the first task in
// key order is the only candidate, so a decision looks at one head per
// group rather than at every queued task.
type group struct {
	inner bool
	res   []Resource // limited resources, sorted
	q     queue
	// pass is the dispatch pass that last found its head held back: it
	// is not looked at again in that pass.
	pass uint64
}

// Scheduler decides when tasks start. Its methods are safe for
// concurrent use.
type Scheduler struct {
	o     Options
	aging int64
	log   *slog.Logger

	mu     sync.Mutex // guards the fields below
	closed bool
	seq    uint64
	live   map[string]*entry
	groups map[string]*group
	glist  []*group
	parked map[string]*queue // by session: tasks waiting for their session's limit
	// held are the parked tasks that need limited resources: each keeps
	// its amounts from tasks with a larger key (holds).
	held      map[*entry]struct{}
	sessRun   map[string]int // running outer tasks per session
	globalRun int
	use       map[Resource]int64
	running   map[*entry]struct{}
	resv      map[Resource]bool // scratch of dispatch
	pass      uint64            // dispatch passes, for group.pass
	endedIDs  [remembered]string
	endedPos  int
	ended     map[string]endedRec
}

type endedRec struct {
	slot int
	ok   bool
}

// New returns a scheduler with o's limits.
func New(o Options) (*Scheduler, error) {
	if o.Limits.Global < 0 || o.Limits.PerSession < 0 || o.Aging < 0 {
		return nil, errors.New("sched: negative limit or aging")
	}
	for r, n := range o.Limits.Resources {
		if n <= 0 {
			return nil, fmt.Errorf("sched: the limit of %s is %d: want a positive amount (leave it out for none)", r, n)
		}
	}
	if o.Aging == 0 {
		o.Aging = DefaultAging
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{o: o, aging: int64(o.Aging), log: o.Logger,
		live: map[string]*entry{}, groups: map[string]*group{}, parked: map[string]*queue{}, held: map[*entry]struct{}{}, sessRun: map[string]int{},
		use: map[Resource]int64{}, running: map[*entry]struct{}{}, resv: map[Resource]bool{}, ended: map[string]endedRec{}}, nil
}

// Ticket is a submitted task: Wait for it to start.
type Ticket struct {
	s *Scheduler
	e *entry
}

// ID is the task's id.
func (t *Ticket) ID() string { return t.e.t.ID }

// Lease is a started task. The holder calls Release (or Finish) when the
// work ends, and Yield at its safe points.
type Lease struct {
	s *Scheduler
	e *entry
}

// Acquire submits t and waits for it to start: the lease, or the
// reason it never will (ctx's error, ErrDependencyFailed, a submission
// error).
func (s *Scheduler) Acquire(ctx context.Context, t Task) (*Lease, error) {
	ts, err := s.Submit(t)
	if err != nil {
		return nil, err
	}
	return ts[0].Wait(ctx)
}

// TryAcquire starts t now if it can, without waiting behind anything:
// its lease, or nil when it would have to wait (it is then withdrawn,
// and nothing of it is left). For work that is only worth doing when a
// slot is free, such as a pre-warmed container (Task.Warm).
func (s *Scheduler) TryAcquire(t Task) (*Lease, error) {
	ts, err := s.Submit(t)
	if err != nil {
		return nil, err
	}
	e := ts[0].e
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.state == stRunning {
		return &Lease{s: s, e: e}, nil
	}
	s.end(e, errNotNow)
	s.dispatch()
	return nil, nil
}

// errNotNow ends a task TryAcquire withdrew.
var errNotNow = errors.New("sched: withdrawn: it could not start at once")

// Submit adds tasks, which may name each other in After in any order.
// The whole submission is refused, nothing added, on a cycle
// (*CycleError), an unknown or failed dependency, a duplicate id or a
// task needing more than a limit. Started tasks are told through their
// Ticket.
func (s *Scheduler) Submit(tasks ...Task) ([]*Ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	batch := make(map[string]int, len(tasks))
	for i := range tasks {
		t := &tasks[i]
		if t.ID == "" {
			t.ID = s.newID(batch)
		}
		if _, dup := batch[t.ID]; dup || s.live[t.ID] != nil {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateID, t.ID)
		}
		batch[t.ID] = i
		if t.Class >= numClasses {
			return nil, fmt.Errorf("sched: task %q: %v", t.ID, t.Class)
		}
		for r, n := range t.Needs {
			if n < 0 {
				return nil, fmt.Errorf("sched: task %q needs %d of %s", t.ID, n, r)
			}
			if lim, ok := s.o.Limits.Resources[r]; ok && n > lim {
				return nil, fmt.Errorf("%w: task %q needs %d of %s, whose limit is %d", ErrExceedsLimit, t.ID, n, r, lim)
			}
		}
	}
	for _, t := range tasks {
		for _, d := range t.After {
			if _, in := batch[d]; in || s.live[d] != nil {
				continue
			}
			rec, ok := s.ended[d]
			switch {
			case !ok:
				return nil, fmt.Errorf("%w: task %q waits for %q", ErrUnknownDependency, t.ID, d)
			case !rec.ok:
				return nil, fmt.Errorf("%w: task %q waits for %q, which failed", ErrDependencyFailed, t.ID, d)
			}
		}
	}
	if err := cycle(tasks, batch); err != nil {
		return nil, err
	}
	now := s.o.Now()
	es := make([]*entry, len(tasks))
	out := make([]*Ticket, len(tasks))
	for i, t := range tasks {
		s.seq++
		t.After = slices.Clone(t.After)
		e := &entry{t: t, seq: s.seq, state: stBlocked, idx: -1, submitted: now, wake: make(chan struct{}), group: s.groupOf(&t)}
		es[i] = e
		out[i] = &Ticket{s: s, e: e}
		s.live[t.ID] = e
	}
	for _, e := range es {
		for _, d := range e.t.After {
			var dep *entry
			if j, in := batch[d]; in {
				dep = es[j]
			} else {
				dep = s.live[d]
			}
			if dep == nil {
				continue // ended well
			}
			e.pending++
			dep.dependents = append(dep.dependents, e)
		}
	}
	for _, e := range es {
		if e.pending == 0 {
			s.enqueue(e, now)
		}
	}
	s.dispatch()
	return out, nil
}

// newID is an id neither live nor in batch.
func (s *Scheduler) newID(batch map[string]int) string {
	for {
		s.seq++
		id := "t" + strconv.FormatUint(s.seq, 10)
		if _, in := batch[id]; !in && s.live[id] == nil {
			return id
		}
	}
}

// cycle finds a cycle among the submission's edges. Tasks already live
// cannot close one: their own dependencies were fixed when they were
// submitted.
func cycle(tasks []Task, batch map[string]int) error {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(tasks))
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		color[i] = grey
		stack = append(stack, i)
		for _, d := range tasks[i].After {
			j, in := batch[d]
			if !in {
				continue
			}
			switch color[j] {
			case grey:
				k := slices.Index(stack, j)
				var path []string
				for _, x := range stack[k:] {
					path = append(path, tasks[x].ID)
				}
				return &CycleError{Path: append(path, tasks[j].ID)}
			case white:
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
		return nil
	}
	for i := range tasks {
		if color[i] == white {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupOf is the group of tasks needing the same limited resources.
func (s *Scheduler) groupOf(t *Task) *group {
	var res []Resource
	for r, n := range t.Needs {
		if _, ok := s.o.Limits.Resources[r]; ok && n > 0 {
			res = append(res, r)
		}
	}
	slices.Sort(res)
	var b strings.Builder
	if t.Inner {
		b.WriteString("i")
	} else {
		b.WriteString("o")
	}
	for _, r := range res {
		b.WriteByte('|')
		b.WriteString(string(r))
	}
	k := b.String()
	g := s.groups[k]
	if g == nil {
		g = &group{inner: t.Inner, res: res}
		s.groups[k] = g
		s.glist = append(s.glist, g)
	}
	return g
}

// enqueue makes e ready: its key is fixed now, and it keeps it when it
// is paused or parked.
func (s *Scheduler) enqueue(e *entry, now time.Time) {
	e.ready = now
	e.key = now.UnixNano() + int64(e.t.Class)*s.aging
	e.state = stQueued
	e.group.q.push(e)
}

// outer reports whether e counts against the global and per-session
// limits.
func outer(e *entry) bool { return !e.t.Inner }

// dispatch starts every queued task that may start, in key order, and
// asks lower-priority work to pause for an interactive task that cannot.
// A task that cannot start reserves what it needs: no task after it in
// key order takes any of it (its resources; a global slot when it counts
// against the global limit), and so does a head held back by such a
// reservation; a task parked behind its session's limit keeps its
// resources by amount (holds). This is what makes the aging bound hold.
func (s *Scheduler) dispatch() {
	clear(s.resv)
	globalHeld := false
	s.pass++
	for {
		var best *entry
		for _, g := range s.glist {
			h := g.q.head()
			if h == nil || g.pass == s.pass {
				continue
			}
			if best == nil || before(h, best) {
				best = h
			}
		}
		if best == nil {
			return
		}
		e := best
		if outer(e) && s.o.Limits.PerSession > 0 && s.sessRun[e.t.Session] >= s.o.Limits.PerSession {
			// Its session's own work holds it back: it waits aside, and
			// its session's next release brings it back.
			remove(e)
			pq := s.parked[e.t.Session]
			if pq == nil {
				pq = &queue{}
				s.parked[e.t.Session] = pq
			}
			pq.push(e)
			if len(e.group.res) > 0 {
				s.held[e] = struct{}{}
			}
			continue
		}
		// A head held back by a task before it, through a reservation,
		// reserves too: otherwise a later task could take the resources
		// it does not wait for now, and pass it once those it waits for
		// come free.
		heldBack := (outer(e) && globalHeld) || s.reserved(e.group)
		if !heldBack && s.fits(e) {
			s.start(e)
			continue
		}
		e.group.pass = s.pass
		for _, r := range e.group.res {
			s.resv[r] = true
		}
		if outer(e) {
			globalHeld = true
		}
		if !heldBack && (e.t.Class == Interactive || (e.t.Inner && !e.t.Warm)) {
			s.preemptFor(e)
		}
	}
}

func (s *Scheduler) reserved(g *group) bool {
	for _, r := range g.res {
		if s.resv[r] {
			return true
		}
	}
	return false
}

// fits reports whether e can start now.
func (s *Scheduler) fits(e *entry) bool {
	if outer(e) && s.o.Limits.Global > 0 && s.globalRun >= s.o.Limits.Global {
		return false
	}
	for _, r := range e.group.res {
		if s.use[r]+e.t.Needs[r]+s.holds(e, r) > s.o.Limits.Resources[r] {
			return false
		}
	}
	return true
}

// holds is the amount of r that tasks parked behind their session's
// limit, with a key before e's, keep from e. A parked task gets its
// global slot back from its own session, whose release brings it back;
// its resources it does not, so without this a task with a larger key
// could take them while it waits and pass it. It holds them from its own
// session's inner work too, which could otherwise still hold them when
// the session's outer task ends (fluffy's turns need no resources, so
// theirs hold nothing).
func (s *Scheduler) holds(e *entry, r Resource) int64 {
	var n int64
	for p := range s.held {
		if before(p, e) {
			n += p.t.Needs[r]
		}
	}
	return n
}

func (s *Scheduler) start(e *entry) {
	remove(e)
	e.state = stRunning
	e.started = s.o.Now()
	e.preempt, e.asked = make(chan struct{}), false
	for _, r := range e.group.res {
		s.use[r] += e.t.Needs[r]
	}
	if outer(e) {
		s.globalRun++
		s.sessRun[e.t.Session]++
	}
	s.running[e] = struct{}{}
	close(e.wake)
}

// free gives back what running e holds; a session below its limit again
// takes its first parked task back into the queue.
func (s *Scheduler) free(e *entry) {
	delete(s.running, e)
	for _, r := range e.group.res {
		s.use[r] -= e.t.Needs[r]
	}
	if !outer(e) {
		return
	}
	s.globalRun--
	sess := e.t.Session
	if s.sessRun[sess]--; s.sessRun[sess] <= 0 {
		delete(s.sessRun, sess)
	}
	if pq := s.parked[sess]; pq != nil {
		p := pq.head()
		remove(p)
		delete(s.held, p)
		if pq.Len() == 0 {
			delete(s.parked, sess)
		}
		p.group.q.push(p)
	}
}

// preemptFor asks running work to pause so that e can start: for each
// limit e is held by, as many victims as the shortfall, counting those
// already asked. dispatch asks for an interactive e, and for inner work
// (a command, a model call) of any class that is not itself a pre-warmed
// container: a pre-warmed container is held for work that has not come,
// so a command that has come goes first. A victim is
// a pre-warmed container first; then, for an interactive e only, non-inner
// work of a lower class whose key is after e's (work that has aged past e
// is left alone), lowest class and latest started first. Inner work is
// not asked: it ends on its own, and its outer task pauses at its next
// safe point.
func (s *Scheduler) preemptFor(e *entry) {
	var cands []*entry
	for v := range s.running {
		if v.t.Warm || (e.t.Class == Interactive && outer(v) && v.t.Class > e.t.Class && v.key > e.key) {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return
	}
	slices.SortFunc(cands, func(a, b *entry) int {
		switch {
		case a.t.Warm != b.t.Warm:
			if a.t.Warm {
				return -1
			}
			return 1
		case a.t.Class != b.t.Class:
			return int(b.t.Class) - int(a.t.Class)
		}
		return b.started.Compare(a.started)
	})
	short := func(holds func(*entry) int64, have, need, lim int64) {
		for _, v := range cands {
			if v.asked {
				have -= holds(v)
			}
		}
		for _, v := range cands {
			if have+need <= lim {
				return
			}
			if !v.asked && holds(v) > 0 {
				s.ask(v)
				have -= holds(v)
			}
		}
	}
	if outer(e) && s.o.Limits.Global > 0 {
		short(func(v *entry) int64 {
			if outer(v) {
				return 1
			}
			return 0
		}, int64(s.globalRun), 1, int64(s.o.Limits.Global))
	}
	for _, r := range e.group.res {
		short(func(v *entry) int64 { return v.t.Needs[r] }, s.use[r], e.t.Needs[r], s.o.Limits.Resources[r])
	}
}

func (s *Scheduler) ask(v *entry) {
	v.asked = true
	close(v.preempt)
	s.log.Debug("preempting", "task", v.t.ID, "class", v.t.Class.String(), "session", v.t.Session, "warm", v.t.Warm)
}

// end ends e with err (nil: success): what it holds is freed, its
// dependents start (or fail), and the queue is looked at again.
func (s *Scheduler) end(e *entry, err error) {
	switch e.state {
	case stEnded:
		return
	case stRunning:
		s.free(e)
	default:
		remove(e)
		delete(s.held, e)
		if e.err == nil {
			if err == nil {
				err = errEndedUnstarted
			}
			e.err = err
			close(e.wake)
		}
	}
	e.state = stEnded
	delete(s.live, e.t.ID)
	s.remember(e.t.ID, err == nil)
	now := s.o.Now()
	for _, d := range e.dependents {
		if d.state == stEnded {
			continue
		}
		if err != nil {
			s.end(d, fmt.Errorf("%w: %q ended: %w", ErrDependencyFailed, e.t.ID, err))
			continue
		}
		if d.pending--; d.pending == 0 {
			s.enqueue(d, now)
		}
	}
	e.dependents = nil
}

func (s *Scheduler) remember(id string, ok bool) {
	if old := s.endedIDs[s.endedPos]; old != "" {
		if r, has := s.ended[old]; has && r.slot == s.endedPos {
			delete(s.ended, old)
		}
	}
	s.endedIDs[s.endedPos] = id
	s.ended[id] = endedRec{slot: s.endedPos, ok: ok}
	s.endedPos = (s.endedPos + 1) % remembered
}

// Wait blocks until the task starts, and returns its lease; or returns
// why it never will: ErrDependencyFailed, ErrClosed, or ctx's error (the
// task is then cancelled, and tasks waiting for it fail).
func (t *Ticket) Wait(ctx context.Context) (*Lease, error) {
	s, e := t.s, t.e
	s.mu.Lock()
	w := e.wake
	s.mu.Unlock()
	select {
	case <-w:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.err != nil {
		return nil, e.err
	}
	if err := ctx.Err(); err != nil {
		s.end(e, err)
		s.dispatch()
		return nil, err
	}
	return &Lease{s: s, e: e}, nil
}

// Task is the lease's task as submitted (with its id).
func (l *Lease) Task() Task { return l.e.t }

// Preempted is closed when the scheduler asks the holder to pause: an
// outer task then calls Yield at its next safe point; the holder of a
// pre-warmed container destroys it and calls Release. A resumed task
// gets a new channel.
func (l *Lease) Preempted() <-chan struct{} {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.e.preempt == nil {
		return nil
	}
	return l.e.preempt
}

// Yield is the task's safe point. When the scheduler has asked it to
// pause, Yield gives back what the task holds, waits for its turn again
// (it keeps its place in the queue) and returns nil once it runs again;
// otherwise it returns at once. When ctx ends while it waits, the task
// is cancelled and ctx's error returned.
func (l *Lease) Yield(ctx context.Context) error {
	s, e := l.s, l.e
	s.mu.Lock()
	w := s.pause(e)
	s.mu.Unlock()
	if w == nil {
		return nil
	}
	s.log.Debug("paused", "task", e.t.ID, "session", e.t.Session)
	select {
	case <-w:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	if err := ctx.Err(); err != nil {
		s.end(e, err)
		s.dispatch()
		return err
	}
	return nil
}

// pause puts running e, asked to pause, back in its queue (with its key)
// and returns the channel closed when it runs again; nil when it was not
// asked.
func (s *Scheduler) pause(e *entry) chan struct{} {
	if e.state != stRunning || !e.asked {
		return nil
	}
	s.free(e)
	e.state = stQueued
	e.wake = make(chan struct{})
	e.group.q.push(e)
	s.dispatch()
	return e.wake
}

// Release ends the task successfully. It is idempotent, and safe after
// a failed Yield.
func (l *Lease) Release() { l.Finish(nil) }

// Finish ends the task; a non-nil err fails the tasks waiting for it
// (ErrDependencyFailed).
func (l *Lease) Finish(err error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(l.e, err)
	s.dispatch()
}

// Close refuses new tasks and fails the waiting ones with ErrClosed;
// running tasks keep their leases until released.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, e := range s.live {
		if e.state != stRunning && e.state != stEnded {
			s.end(e, ErrClosed)
		}
	}
}

type leaseKey struct{}

// WithLease returns ctx carrying l: the work done under ctx (a turn's
// model calls and commands) is l's inner work, of its class and session.
func WithLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFrom returns the lease ctx carries.
func LeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}
