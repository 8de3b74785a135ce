package sched

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// seeds is the range of seeds TestPropertyBoundsAndLimits runs: the
// default is cheap enough for every test run; a developer runs thousands
// with -sched.seeds=0-5000.
var seeds = flag.String("sched.seeds", "0-300", "seeds of TestPropertyBoundsAndLimits: FROM-TO (TO excluded) or one seed")

// trace logs each simulation's workload and events, to study a failing seed.
var trace = flag.Bool("sched.trace", false, "log the workload and events of TestPropertyBoundsAndLimits")

// simTask is a task of the simulation with what the simulation saw.
type simTask struct {
	t       Task
	arrive  time.Duration
	dur     time.Duration
	tk      *Ticket
	left    time.Duration // run time still to do
	running bool
	since   time.Duration // when it last started
	yieldAt time.Duration // its next safe point once asked; -1: not asked
	starts  int
	ready   time.Duration // first became queued
	wait    time.Duration // ready → first start
	// carried is what was running when it became ready, with the run
	// time each had left then.
	carried map[*simTask]time.Duration
	done    bool
}

const safePoint = time.Second

// TestPropertyBoundsAndLimits simulates random workloads against the
// scheduler with a fake clock: tasks of every class, sessions, resources,
// inner and pre-warmed work, dependencies, and holders that pause at their
// next safe point when asked. After every event no limit is exceeded, as
// the simulation counts what runs; at the end every task has run, and each
// waited no longer than its bound (docs/sched.md, and bound below).
func TestPropertyBoundsAndLimits(t *testing.T) {
	from, to, err := seedRange(*seeds)
	if err != nil {
		t.Fatal(err)
	}
	for seed := from; seed < to; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { simulate(t, seed) })
	}
}

// seedRange reads "FROM-TO" (TO excluded) or a single seed.
func seedRange(v string) (from, to uint64, err error) {
	if _, err := fmt.Sscanf(v, "%d-%d", &from, &to); err == nil && from < to {
		return from, to, nil
	}
	if _, err := fmt.Sscanf(v, "%d", &from); err != nil {
		return 0, 0, fmt.Errorf("-sched.seeds=%q: want FROM-TO or one seed", v)
	}
	return from, from + 1, nil
}

func simulate(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 33))
	lim := Limits{Global: 1 + r.IntN(4), PerSession: r.IntN(3), Resources: map[Resource]int64{Sandboxes: int64(1 + r.IntN(3)), Model("a"): int64(1 + r.IntN(3)), Memory: 100}}
	c := newClock()
	t0 := c.Now()
	s, err := New(Options{Limits: lim, Now: c.Now, Aging: time.Duration(1+r.IntN(30)) * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := 10 + r.IntN(50)
	logf := func(format string, args ...any) {
		if *trace {
			t.Logf(format, args...)
		}
	}
	logf("limits %+v aging %v", lim, s.o.Aging)
	tasks := make([]*simTask, n)
	arrive := time.Duration(0)
	for i := range tasks {
		arrive += time.Duration(r.IntN(5)) * time.Second
		st := &simTask{arrive: arrive, dur: time.Duration(1+r.IntN(20)) * time.Second, yieldAt: -1, ready: -1}
		st.left = st.dur
		st.t = Task{ID: fmt.Sprintf("t%d", i), Class: Class(r.IntN(3)), Session: fmt.Sprintf("s%d", r.IntN(4)), Needs: map[Resource]int64{}, Inner: r.IntN(3) == 0}
		if r.IntN(2) == 0 {
			st.t.Needs[Sandboxes] = 1
		}
		if r.IntN(2) == 0 {
			st.t.Needs[Model("a")] = 1
		}
		if r.IntN(3) == 0 {
			st.t.Needs[Memory] = int64(10 + r.IntN(60))
		}
		if st.t.Inner && r.IntN(4) == 0 {
			st.t.Warm = true
		}
		if i > 0 && r.IntN(4) == 0 {
			st.t.After = []string{tasks[r.IntN(i)].t.ID}
		}
		tasks[i] = st
		logf("%s arrives %v runs %v: %s %s inner=%v warm=%v needs %v after %v", st.t.ID, st.arrive, st.dur, st.t.Class, st.t.Session, st.t.Inner, st.t.Warm, st.t.Needs, st.t.After)
	}
	now := func() time.Duration { return c.Now().Sub(t0) }
	// observe records what the scheduler changed, and checks the limits.
	observe := func() {
		for _, st := range tasks {
			if st.tk == nil || st.done {
				continue
			}
			s.mu.Lock()
			state, asked := st.tk.e.state, st.tk.e.asked
			s.mu.Unlock()
			if st.ready < 0 && state >= stQueued {
				st.ready = now()
				logf("%v: %s ready, key %v", now(), st.t.ID, time.Duration(st.tk.e.key-t0.UnixNano()))
				st.carried = map[*simTask]time.Duration{}
				for _, o := range tasks {
					if o.running {
						st.carried[o] = o.left
					}
				}
			}
			if state == stRunning && !st.running {
				logf("%v: %s starts", now(), st.t.ID)
				st.running, st.since = true, now()
				if st.starts == 0 {
					st.wait = now() - st.ready
				}
				st.starts++
			}
			if st.running && asked && st.yieldAt < 0 {
				st.yieldAt = now() + safePoint
				if st.t.Warm {
					st.yieldAt = now()
				}
			}
		}
		use := map[Resource]int64{}
		global, sess := 0, map[string]int{}
		for _, st := range tasks {
			if !st.running {
				continue
			}
			for r, n := range st.t.Needs {
				use[r] += n
			}
			if !st.t.Inner {
				global++
				sess[st.t.Session]++
			}
		}
		for r, n := range use {
			if n > lim.Resources[r] {
				t.Fatalf("at %v %s in use %d > limit %d", now(), r, n, lim.Resources[r])
			}
		}
		if lim.Global > 0 && global > lim.Global {
			t.Fatalf("at %v %d running > global %d", now(), global, lim.Global)
		}
		for ss, n := range sess {
			if lim.PerSession > 0 && n > lim.PerSession {
				t.Fatalf("at %v session %s runs %d > %d", now(), ss, n, lim.PerSession)
			}
		}
	}
	next := 0
	for steps := 0; ; steps++ {
		if steps > 100000 {
			t.Fatal("the simulation does not end")
		}
		// The next event: an arrival, an end, a safe point.
		at := time.Duration(-1)
		consider := func(d time.Duration) {
			if at < 0 || d < at {
				at = d
			}
		}
		if next < n {
			consider(tasks[next].arrive)
		}
		for _, st := range tasks {
			if st.running {
				consider(st.since + st.left)
				if st.yieldAt >= 0 {
					consider(st.yieldAt)
				}
			}
		}
		if at < 0 {
			break
		}
		c.Advance(at - now())
		for next < n && tasks[next].arrive == now() {
			st := tasks[next]
			ts, err := s.Submit(st.t)
			if err != nil {
				t.Fatalf("submit %s: %v", st.t.ID, err)
			}
			st.tk = ts[0]
			next++
			observe()
		}
		for _, st := range tasks {
			if !st.running {
				continue
			}
			ran := now() - st.since
			switch {
			case ran >= st.left:
				st.running, st.done, st.left = false, true, 0
				logf("%v: %s ends", now(), st.t.ID)
				l, _ := st.tk.Wait(t.Context())
				l.Release()
			case st.yieldAt == now() && st.t.Warm:
				// A pre-warmed container is destroyed: its task is done.
				st.running, st.done = false, true
				l, _ := st.tk.Wait(t.Context())
				l.Release()
			case st.yieldAt == now():
				st.running, st.left, st.yieldAt = false, st.left-ran, -1
				s.mu.Lock()
				s.pause(st.tk.e)
				logf("%v: %s pauses", now(), st.t.ID)
				s.mu.Unlock()
			default:
				continue
			}
			observe()
		}
	}
	for _, st := range tasks {
		if !st.done {
			t.Fatalf("%s never ran to its end (started %d times)", st.t.ID, st.starts)
		}
		if bound := bound(tasks, st); st.wait > bound {
			t.Errorf("%s (%s) waited %v, over its bound %v", st.t.ID, st.t.Class, st.wait, bound)
		}
	}
}

// bound is st's longest wait (docs/sched.md): the run time of the tasks
// ahead of it in key order, plus what was left of the tasks running when
// it, or a task ahead of it that became ready after it, became ready. A
// task ahead of it that became ready later may wait for work that started
// while st waited, on resources st does not need; st then waits behind
// that task.
func bound(tasks []*simTask, st *simTask) time.Duration {
	var b time.Duration
	left := map[*simTask]time.Duration{}
	carry := func(c map[*simTask]time.Duration) {
		for o, d := range c {
			left[o] = max(left[o], d)
		}
	}
	carry(st.carried)
	ahead := map[*simTask]bool{}
	for _, o := range tasks {
		if o != st && before(o.tk.e, st.tk.e) {
			ahead[o] = true
			b += o.dur
			if o.ready >= st.ready {
				carry(o.carried)
			}
		}
	}
	for o, d := range left {
		if !ahead[o] && o != st {
			b += d
		}
	}
	return b
}
