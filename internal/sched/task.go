// Package sched owns the scheduler: what runs when. Every unit of work
// (a daemon's turn, a model call, a sandboxed command, a pre-warmed
// container) is a Task with a priority class, an owner session, the
// resources it holds while it runs and, optionally, tasks it must wait
// for. The scheduler starts tasks in priority order within concurrency
// limits per resource, per session and overall, asks lower-priority work
// to pause when an interactive task waits, and ages waiting work so that
// none starves (docs/sched.md states the bound).
//
// It is event-driven: every decision is taken when something happens (a
// submission, a release, a pause, a cancellation), under one lock, with
// no goroutine and no timer of its own. Time enters only through
// Options.Now, so tests drive it with a fake clock.
package sched

import (
	"errors"
	"fmt"
	"strings"
)

// Class is a task's priority class; a lower value is served first.
type Class uint8

// The classes, highest priority first.
const (
	// Interactive work has a person waiting on it: a terminal's turn.
	Interactive Class = iota
	// Triggered work answers an event: a webhook, a mail, a cron job.
	Triggered
	// Background work nobody waits on: the heartbeat, retention.
	Background
	numClasses
)

var classNames = [numClasses]string{"interactive", "triggered", "background"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass reads a class name as String writes it.
func ParseClass(s string) (Class, error) {
	for i, n := range classNames {
		if n == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown class %q (want interactive, triggered or background)", s)
}

// Resource names what a task holds while it runs. A resource without a
// limit (Limits.Resources) is not counted.
type Resource string

// The resources fluffy's wiring uses; Model names one per provider.
const (
	Sandboxes  Resource = "sandboxes"
	Containers Resource = "containers"
	// Memory is counted in bytes.
	Memory Resource = "memory"
)

// Model is the resource of one provider's model calls ("model:anthropic").
func Model(provider string) Resource { return Resource("model:" + provider) }

// Task is a unit of work as submitted.
type Task struct {
	// ID names the task among the live ones and in other tasks' After;
	// empty: the scheduler assigns one ("t" and a number).
	ID    string
	Class Class
	// Session is the owner session ("" for work no session owns).
	Session string
	// Label says what the task is, for status ("turn", "model call").
	Label string
	// Needs is what the task holds while it runs: an amount per resource
	// (1 for a slot, bytes for Memory).
	Needs map[Resource]int64
	// After are the tasks that must end, successfully, before this one
	// starts: live tasks, tasks of the same submission, or tasks ended
	// recently (the scheduler remembers the last 4096 outcomes).
	After []string
	// Inner marks work done inside another running task of its session
	// (a model call or a command inside a turn): it counts against its
	// resources only, not against the global and per-session limits,
	// which the outer task already holds. Without it a turn holding the
	// last global slot could wait forever for its own model call.
	Inner bool
	// Warm marks a pre-warmed container: held for a command that has not
	// come yet, so it is the first to go when an interactive task needs
	// its slot.
	Warm bool
}

// Errors callers branch on.
var (
	// ErrUnknownDependency: After names a task that is neither live, in
	// the same submission, nor among the recently ended.
	ErrUnknownDependency = errors.New("sched: unknown dependency")
	// ErrDependencyFailed: a task this one waits for was cancelled or
	// ended with an error; this one never starts.
	ErrDependencyFailed = errors.New("sched: a dependency failed")
	// ErrDuplicateID: a task of that ID is live, or named twice.
	ErrDuplicateID = errors.New("sched: duplicate task id")
	// ErrExceedsLimit: the task needs more of a resource than its limit,
	// so it could never start.
	ErrExceedsLimit = errors.New("sched: the task needs more than a limit allows")
	// ErrClosed: the scheduler is closed.
	ErrClosed = errors.New("sched: closed")
)

// CycleError refuses a submission whose After edges make a cycle. Path
// is the cycle, its first task repeated at its end.
type CycleError struct{ Path []string }

func (e *CycleError) Error() string {
	return "sched: dependency cycle: " + strings.Join(e.Path, " -> ")
}
