package sched

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newSched(t testing.TB, c *clock, l Limits) *Scheduler {
	t.Helper()
	s, err := New(Options{Limits: l, Now: c.Now, Aging: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func submit(t testing.TB, s *Scheduler, tasks ...Task) []*Ticket {
	t.Helper()
	ts, err := s.Submit(tasks...)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// started reports, without waiting, whether tk's task has started.
func started(tk *Ticket) bool {
	tk.s.mu.Lock()
	defer tk.s.mu.Unlock()
	return tk.e.state == stRunning
}

// lease returns tk's lease; it must have started.
func lease(t testing.TB, tk *Ticket) *Lease {
	t.Helper()
	if !started(tk) {
		t.Fatalf("task %s has not started", tk.ID())
	}
	l, err := tk.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func asked(l *Lease) bool {
	select {
	case <-l.Preempted():
		return true
	default:
		return false
	}
}

// startedIDs lists which of ts have started.
func startedIDs(ts ...*Ticket) string {
	var ids []string
	for _, tk := range ts {
		if started(tk) {
			ids = append(ids, tk.ID())
		}
	}
	return strings.Join(ids, ",")
}

func TestPriorities(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 1})
	first := submit(t, s, Task{ID: "first", Class: Background})[0]
	l := lease(t, first)
	var ts []*Ticket
	for _, x := range []struct {
		id string
		c  Class
	}{{"bg", Background}, {"trig", Triggered}, {"int", Interactive}, {"trig2", Triggered}} {
		ts = append(ts, submit(t, s, Task{ID: x.id, Class: x.c})[0])
		c.Advance(time.Second)
	}
	var order []string
	for range ts {
		// A preempted background task yields at its safe point: here
		// the first one ends instead.
		l.Release()
		for _, tk := range ts {
			if started(tk) && !strings.Contains(strings.Join(order, ","), tk.ID()) {
				order = append(order, tk.ID())
				l = lease(t, tk)
			}
		}
	}
	l.Release()
	if got, want := strings.Join(order, ","), "int,trig,trig2,bg"; got != want {
		t.Fatalf("start order %s, want %s", got, want)
	}
}

func TestDependencies(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{})
	// Submitted before what they wait for, in one submission.
	ts := submit(t, s,
		Task{ID: "report", After: []string{"fetch", "build"}},
		Task{ID: "build", After: []string{"fetch"}},
		Task{ID: "fetch"},
	)
	report, build, fetch := ts[0], ts[1], ts[2]
	if got := startedIDs(ts...); got != "fetch" {
		t.Fatalf("started %q, want fetch only", got)
	}
	lease(t, fetch).Release()
	if got := startedIDs(report, build); got != "build" {
		t.Fatalf("started %q, want build", got)
	}
	// A task after one that ended well starts at once.
	late := submit(t, s, Task{ID: "late", After: []string{"fetch"}})[0]
	if !started(late) {
		t.Fatal("a task after an ended dependency waits")
	}
	lease(t, late).Release()
	// A failed dependency fails what waits for it, transitively.
	more := submit(t, s, Task{ID: "after-report", After: []string{"report"}})[0]
	lease(t, build).Finish(errors.New("compile error"))
	for _, tk := range []*Ticket{report, more} {
		if _, err := tk.Wait(context.Background()); !errors.Is(err, ErrDependencyFailed) {
			t.Fatalf("%s: %v, want ErrDependencyFailed", tk.ID(), err)
		}
	}
	if _, err := s.Submit(Task{After: []string{"build"}}); !errors.Is(err, ErrDependencyFailed) {
		t.Fatalf("after a failed task: %v", err)
	}
	if _, err := s.Submit(Task{After: []string{"nobody"}}); !errors.Is(err, ErrUnknownDependency) {
		t.Fatalf("after an unknown task: %v", err)
	}
	_, err := s.Submit(Task{ID: "a", After: []string{"b"}}, Task{ID: "b", After: []string{"c"}}, Task{ID: "c", After: []string{"a"}})
	var ce *CycleError
	if !errors.As(err, &ce) || strings.Join(ce.Path, ">") != "a>b>c>a" {
		t.Fatalf("cycle: %v", err)
	}
	if st := s.Status(); len(st.Waiting)+len(st.Running) != 0 {
		t.Fatalf("a refused submission left tasks: %+v", st)
	}
}

func TestLimits(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 3, PerSession: 1, Resources: map[Resource]int64{Sandboxes: 2, Memory: 100}})
	ts := submit(t, s,
		Task{ID: "a1", Session: "a"},
		Task{ID: "a2", Session: "a"}, // behind a1: one per session
		Task{ID: "b1", Session: "b"},
		Task{ID: "c1", Session: "c"},
		Task{ID: "d1", Session: "d"}, // global 3/3
	)
	if got := startedIDs(ts...); got != "a1,b1,c1" {
		t.Fatalf("started %s, want a1,b1,c1", got)
	}
	st := s.Status()
	why := map[string]string{}
	for _, w := range st.Waiting {
		why[w.ID] = w.Why
	}
	if !strings.Contains(why["a2"], "session a 1/1 running") || !strings.Contains(why["d1"], "global 3/3 in use") {
		t.Fatalf("why: %q", why)
	}
	// Inner work is not bounded by global or per session, only by its
	// resources.
	in := submit(t, s,
		Task{ID: "x1", Session: "a", Inner: true, Needs: map[Resource]int64{Sandboxes: 1, Memory: 60}},
		Task{ID: "x2", Session: "a", Inner: true, Needs: map[Resource]int64{Sandboxes: 1, Memory: 60}}, // memory 120 > 100
		Task{ID: "x3", Session: "b", Inner: true, Needs: map[Resource]int64{Sandboxes: 1, Memory: 10}}, // behind x2: it reserves
	)
	if got := startedIDs(in...); got != "x1" {
		t.Fatalf("started %s, want x1", got)
	}
	st = s.Status()
	if st.Use["memory"] != 60 || st.Use["sandboxes"] != 1 || st.Use["global"] != 3 {
		t.Fatalf("use %v", st.Use)
	}
	for _, w := range st.Waiting {
		if w.ID == "x3" && w.Why != "behind 1 triggered task" && w.Why != "behind 1 interactive task" {
			t.Fatalf("x3: %q", w.Why)
		}
		if w.ID == "x2" && !strings.Contains(w.Why, "memory 60/100 in use") {
			t.Fatalf("x2: %q", w.Why)
		}
	}
	lease(t, in[0]).Release()
	if got := startedIDs(in...); got != "x2,x3" {
		t.Fatalf("started %s, want x2,x3", got)
	}
	lease(t, ts[0]).Release() // a1 ends: a2 takes a's slot
	if got := startedIDs(ts...); got != "a2,b1,c1" {
		t.Fatalf("started %s, want a2,b1,c1", got)
	}
	if _, err := s.Submit(Task{Needs: map[Resource]int64{Memory: 101}}); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("more than the limit: %v", err)
	}
	for _, tk := range append(ts[1:], in[1:]...) {
		if started(tk) {
			lease(t, tk).Release()
		}
	}
	if st := s.Status(); len(st.Running)+len(st.Waiting) != 0 {
		t.Fatalf("left: %+v", st)
	}
}

func TestPreemption(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 2, Resources: map[Resource]int64{Containers: 2}})
	ts := submit(t, s,
		Task{ID: "bg", Class: Background, Session: "s1"},
		Task{ID: "warm", Class: Background, Warm: true, Inner: true, Needs: map[Resource]int64{Containers: 1}},
		Task{ID: "run", Class: Triggered, Session: "s2", Inner: true, Needs: map[Resource]int64{Containers: 1}},
		Task{ID: "trig", Class: Triggered, Session: "s2"},
	)
	bg, warm, run, trig := lease(t, ts[0]), lease(t, ts[1]), lease(t, ts[2]), lease(t, ts[3])
	// An interactive command needs a container: the pre-warmed one goes,
	// not the one running a command.
	cmd := submit(t, s, Task{ID: "cmd", Class: Interactive, Session: "s3", Inner: true, Needs: map[Resource]int64{Containers: 1}})[0]
	if !asked(warm) || asked(run) {
		t.Fatalf("asked: warm %v, running %v", asked(warm), asked(run))
	}
	warm.Release() // the pool destroys it
	if !started(cmd) {
		t.Fatal("the interactive command did not get the warm container's slot")
	}
	// An interactive turn: the background turn pauses, not the
	// triggered one.
	turn := submit(t, s, Task{ID: "turn", Class: Interactive, Session: "s3"})[0]
	if !asked(bg) || asked(trig) {
		t.Fatalf("asked: background %v, triggered %v", asked(bg), asked(trig))
	}
	if got := s.Status(); !strings.Contains(statusLine(got, "bg"), "pausing") {
		t.Fatalf("status: %+v", got.Running)
	}
	if started(turn) {
		t.Fatal("started before the background task reached its safe point")
	}
	done := make(chan error)
	go func() { done <- bg.Yield(t.Context()) }()
	waitFor(t, func() bool { return started(turn) })
	// The paused task resumes when the interactive one ends, ahead of
	// later work of its class (it kept its place).
	c.Advance(time.Second)
	later := submit(t, s, Task{ID: "later", Class: Background, Session: "s4"})[0]
	lease(t, turn).Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if started(later) || !startedIs(ts[0]) {
		t.Fatal("the paused task did not resume first")
	}
	// A task not asked passes its safe point at once.
	if err := trig.Yield(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lease{bg, run, trig, lease(t, cmd)} {
		l.Release()
	}
	lease(t, later).Release()
}

// A pre-warmed container gives its slot to any command that waits for
// one, whatever the command's class, and never to another pre-warmed
// container; TryAcquire takes a slot only when one is free, leaving
// nothing queued when none is.
func TestWarmGivesWay(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Resources: map[Resource]int64{Containers: 2}})
	warmTask := Task{Class: Background, Warm: true, Inner: true, Needs: map[Resource]int64{Containers: 1}}
	w1, err := s.TryAcquire(warmTask)
	if err != nil || w1 == nil {
		t.Fatalf("first warm: %v %v", w1, err)
	}
	run := submit(t, s, Task{ID: "run", Class: Background, Session: "s1", Inner: true, Needs: map[Resource]int64{Containers: 1}})[0]
	r := lease(t, run)
	if w, err := s.TryAcquire(warmTask); err != nil || w != nil {
		t.Fatalf("a warm container at the limit: %v %v", w, err)
	}
	if asked(w1) || asked(r) {
		t.Fatal("a warm container's TryAcquire asked for room")
	}
	if st := s.Status(); len(st.Waiting) != 0 || len(st.Running) != 2 {
		t.Fatalf("after a refused TryAcquire: %+v", st)
	}
	// A triggered command at the limit: the warm container is asked to
	// go, the running command is not.
	cmd := submit(t, s, Task{ID: "cmd", Class: Triggered, Session: "s2", Inner: true, Needs: map[Resource]int64{Containers: 1}})[0]
	if !asked(w1) || asked(r) || started(cmd) {
		t.Fatalf("asked: warm %v, running %v; started %v", asked(w1), asked(r), started(cmd))
	}
	w1.Release()
	if !started(cmd) {
		t.Fatal("the command did not get the warm container's slot")
	}
	r.Release()
	lease(t, cmd).Release()
}

// startedIs is started for a ticket whose lease a goroutine holds.
func startedIs(tk *Ticket) bool { return started(tk) }

func statusLine(st Status, id string) string {
	for _, r := range st.Running {
		if r.ID == id {
			if r.Pausing {
				return id + " pausing"
			}
			return id
		}
	}
	return ""
}

// waitFor waits for cond, which another goroutine makes true.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition never held")
}

func TestAging(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 1})
	hold := lease(t, submit(t, s, Task{ID: "hold", Class: Triggered})[0])
	bg := submit(t, s, Task{ID: "bg", Class: Background})[0]
	// Interactive work keeps arriving: each is ahead of the background
	// task while it comes within 2×aging (2m) of it.
	c.Advance(time.Minute + 59*time.Second)
	early := submit(t, s, Task{ID: "early", Class: Interactive})[0]
	c.Advance(2 * time.Second)
	late := submit(t, s, Task{ID: "late", Class: Interactive})[0]
	hold.Release()
	if !started(early) {
		t.Fatal("interactive work within the aging window did not go first")
	}
	lease(t, early).Release()
	if !started(bg) || started(late) {
		t.Fatalf("the background task aged 2m did not pass later interactive work (%s)", startedIDs(bg, late))
	}
	// It has aged past "late": an interactive task never preempts work
	// that is ahead of it.
	l := lease(t, bg)
	if asked(l) {
		t.Fatal("aged work was asked to pause")
	}
	l.Release()
	lease(t, late).Release()
}

func TestCancelWhileWaiting(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 1})
	hold := lease(t, submit(t, s, Task{ID: "hold"})[0])
	ts := submit(t, s, Task{ID: "w"}, Task{ID: "dep", After: []string{"w"}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ts[0].Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := ts[1].Wait(t.Context()); !errors.Is(err, ErrDependencyFailed) {
		t.Fatal(err)
	}
	s.Close()
	hold.Release()
	if _, err := s.Submit(Task{}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestAcquireBlocks(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 1})
	l, err := s.Acquire(t.Context(), Task{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease)
	go func() {
		l2, err := s.Acquire(t.Context(), Task{ID: "b"})
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitFor(t, func() bool { return len(s.Status().Waiting) == 1 })
	l.Release()
	(<-got).Release()
}
