package sched

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MethodStatus is the kernel's IPC method answering Status
// (docs/ipc.md).
const MethodStatus = "sched.status"

// Status is what the scheduler runs and why the rest waits: the wire
// type of "fluffy sched status" (docs/sched.md).
type Status struct {
	Aging string `json:"aging"`
	// Limits are the configured limits ("global", "per_session" and each
	// resource); Use is what running tasks hold of each.
	Limits map[string]int64 `json:"limits"`
	Use    map[string]int64 `json:"use"`
	// Queued counts the waiting tasks per class.
	Queued  map[string]int `json:"queued"`
	Running []TaskStatus   `json:"running"`
	// Waiting are the first MaxWaiting waiting tasks in the order they
	// would start; Queued counts them all.
	Waiting []TaskStatus `json:"waiting"`
}

// MaxWaiting bounds Status.Waiting.
const MaxWaiting = 50

// TaskStatus is one task in Status.
type TaskStatus struct {
	ID      string           `json:"id"`
	Class   string           `json:"class"`
	Session string           `json:"session,omitempty"`
	Label   string           `json:"label,omitempty"`
	Needs   map[string]int64 `json:"needs,omitempty"`
	Inner   bool             `json:"inner,omitempty"`
	Warm    bool             `json:"warm,omitempty"`
	// Since is when it started (running) or was submitted (waiting).
	Since time.Time `json:"since"`
	// Pausing: asked to pause at its next safe point.
	Pausing bool `json:"pausing,omitempty"`
	// Why says what holds a waiting task back.
	Why string `json:"why,omitempty"`
}

// Status reports the scheduler's state now.
func (s *Scheduler) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Aging: time.Duration(s.aging).String(), Limits: map[string]int64{}, Use: map[string]int64{}, Queued: map[string]int{}}
	if s.o.Limits.Global > 0 {
		st.Limits["global"] = int64(s.o.Limits.Global)
	}
	if s.o.Limits.PerSession > 0 {
		st.Limits["per_session"] = int64(s.o.Limits.PerSession)
	}
	st.Use["global"] = int64(s.globalRun)
	for r, n := range s.o.Limits.Resources {
		st.Limits[string(r)] = n
		st.Use[string(r)] = s.use[r]
	}
	for e := range s.running {
		ts := s.taskStatus(e)
		ts.Since, ts.Pausing = e.started, e.asked
		st.Running = append(st.Running, ts)
	}
	slices.SortFunc(st.Running, func(a, b TaskStatus) int { return a.Since.Compare(b.Since) })
	var queued, blocked []*entry
	for _, e := range s.live {
		switch e.state {
		case stQueued:
			queued = append(queued, e)
		case stBlocked:
			blocked = append(blocked, e)
		default:
			continue
		}
		st.Queued[e.t.Class.String()]++
	}
	slices.SortFunc(queued, func(a, b *entry) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	slices.SortFunc(blocked, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	for i, e := range append(queued, blocked...) {
		if len(st.Waiting) == MaxWaiting {
			break
		}
		ts := s.taskStatus(e)
		ts.Since = e.submitted
		if e.state == stBlocked {
			ts.Why = s.whyBlocked(e)
		} else {
			ts.Why = s.whyQueued(e, queued[:i])
		}
		st.Waiting = append(st.Waiting, ts)
	}
	return st
}

func (s *Scheduler) taskStatus(e *entry) TaskStatus {
	ts := TaskStatus{ID: e.t.ID, Class: e.t.Class.String(), Session: e.t.Session, Label: e.t.Label, Inner: e.t.Inner, Warm: e.t.Warm}
	for r, n := range e.t.Needs {
		if ts.Needs == nil {
			ts.Needs = map[string]int64{}
		}
		ts.Needs[string(r)] = n
	}
	return ts
}

func (s *Scheduler) whyBlocked(e *entry) string {
	var after []string
	for _, d := range e.t.After {
		if x := s.live[d]; x != nil {
			after = append(after, d)
		}
	}
	return "after " + strings.Join(after, ", ")
}

// whyQueued names what holds a queued task: its session's limit, the
// limits that are full, and the tasks ahead of it that want the same.
func (s *Scheduler) whyQueued(e *entry, ahead []*entry) string {
	var why []string
	if outer(e) && s.o.Limits.PerSession > 0 && s.sessRun[e.t.Session] >= s.o.Limits.PerSession {
		why = append(why, fmt.Sprintf("session %s %d/%d running", e.t.Session, s.sessRun[e.t.Session], s.o.Limits.PerSession))
	}
	if outer(e) && s.o.Limits.Global > 0 && s.globalRun >= s.o.Limits.Global {
		why = append(why, fmt.Sprintf("global %d/%d in use", s.globalRun, s.o.Limits.Global))
	}
	for _, r := range e.group.res {
		if lim := s.o.Limits.Resources[r]; s.use[r]+e.t.Needs[r] > lim {
			why = append(why, fmt.Sprintf("%s %d/%d in use", r, s.use[r], lim))
		}
	}
	var behind [numClasses]int
	for _, a := range ahead {
		if competes(a, e) {
			behind[a.t.Class]++
		}
	}
	var bs []string
	for c, n := range behind {
		if n > 0 {
			bs = append(bs, fmt.Sprintf("%d %s", n, Class(c)))
		}
	}
	if len(bs) > 0 {
		why = append(why, "behind "+strings.Join(bs, ", ")+" "+plural(behind[0]+behind[1]+behind[2], "task", "tasks"))
	}
	if len(why) == 0 {
		return "starting"
	}
	return strings.Join(why, ", ")
}

// competes reports whether a and b want a same limit.
func competes(a, b *entry) bool {
	if outer(a) && outer(b) {
		return true
	}
	for _, r := range a.group.res {
		if slices.Contains(b.group.res, r) {
			return true
		}
	}
	return false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
