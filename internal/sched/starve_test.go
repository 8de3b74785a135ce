package sched

import (
	"testing"
	"time"
)

// The scenarios below are the property test's failing seeds, minimised:
// in each, a task with a larger key took something an earlier task needed
// while that task waited, and the earlier task waited past its bound.

// TestParkedKeepsResources: a task waiting behind its session's limit
// keeps the resources it needs from later tasks (seed 2835: memory).
// Before, it reserved nothing, so a later task of another session took
// the memory, and the parked task waited for it after its session's turn
// ended.
func TestParkedKeepsResources(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 2, PerSession: 1, Resources: map[Resource]int64{Memory: 100}})
	turn := submit(t, s, Task{ID: "turn", Class: Triggered, Session: "a"})[0]
	c.Advance(time.Second)
	parked := submit(t, s, Task{ID: "parked", Class: Interactive, Session: "a", Needs: map[Resource]int64{Memory: 46}})[0]
	c.Advance(time.Second)
	later := submit(t, s, Task{ID: "later", Class: Triggered, Session: "b", Needs: map[Resource]int64{Memory: 68}})[0]
	if started(later) {
		t.Fatal("a later task took the memory of a task parked behind its session's limit")
	}
	lease(t, turn).Release()
	if !started(parked) || started(later) {
		t.Fatalf("after its session's turn: started %s, want parked", startedIDs(parked, later))
	}
	lease(t, parked).Release()
	lease(t, later).Release()
}

// TestParkedKeepsModelSlot: the same with a model slot, and a later task
// whose key ties (seed 2393): an interactive task that became ready after
// a parked triggered one, with the same key, may not take its slot.
func TestParkedKeepsModelSlot(t *testing.T) {
	c := newClock()
	s, err := New(Options{Limits: Limits{Global: 4, PerSession: 1, Resources: map[Resource]int64{Model("a"): 2}}, Now: c.Now, Aging: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	turn := submit(t, s, Task{ID: "turn", Class: Triggered, Session: "a"})[0]
	call := submit(t, s, Task{ID: "call", Class: Triggered, Session: "b", Inner: true, Needs: map[Resource]int64{Model("a"): 1}})[0]
	parked := submit(t, s, Task{ID: "parked", Class: Triggered, Session: "a", Needs: map[Resource]int64{Model("a"): 1}})[0]
	c.Advance(3 * time.Second)
	tie := submit(t, s, Task{ID: "tie", Class: Interactive, Session: "c", Needs: map[Resource]int64{Model("a"): 1}})[0]
	if started(tie) {
		t.Fatal("a task with the same key, submitted later, took the model slot of a parked task")
	}
	lease(t, turn).Release()
	if !started(parked) {
		t.Fatal("the parked task did not start when its session's turn ended")
	}
	lease(t, call).Release()
	if !started(tie) {
		t.Fatal("the later task did not start once the model slot was free")
	}
	lease(t, parked).Release()
	lease(t, tie).Release()
}

// TestHeldHeadReserves: a head held back by an earlier task's
// reservation reserves what it needs too (seed 3882: a sandbox). Before,
// it was only skipped, so a later task took the sandbox it would need
// once the model slot it waited for came free.
func TestHeldHeadReserves(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 2, Resources: map[Resource]int64{Model("a"): 1, Sandboxes: 1}})
	call := submit(t, s, Task{ID: "call", Class: Triggered, Session: "a", Inner: true, Needs: map[Resource]int64{Model("a"): 1}})[0]
	c.Advance(time.Second)
	waiting := submit(t, s, Task{ID: "waiting", Class: Interactive, Session: "b", Inner: true, Needs: map[Resource]int64{Model("a"): 1}})[0]
	c.Advance(time.Second)
	head := submit(t, s, Task{ID: "head", Class: Interactive, Session: "c", Needs: map[Resource]int64{Model("a"): 1, Sandboxes: 1}})[0]
	c.Advance(time.Second)
	later := submit(t, s, Task{ID: "later", Class: Interactive, Session: "d", Needs: map[Resource]int64{Sandboxes: 1}})[0]
	if started(later) {
		t.Fatal("a later task took the sandbox of a head held back by an earlier reservation")
	}
	lease(t, call).Release()
	lease(t, waiting).Release()
	if !started(head) || started(later) {
		t.Fatalf("started %s, want head", startedIDs(head, later))
	}
	lease(t, head).Release()
	lease(t, later).Release()
}

// TestHeldHeadKeepsSessionSlot: a head held back by an earlier task's
// reservation keeps its session's slot and a global slot from later
// outer work (seed 1974). Before, a later task of its own session that
// needed none of the reserved resources started and took the session's
// only slot, so the head then waited behind its session.
func TestHeldHeadKeepsSessionSlot(t *testing.T) {
	c := newClock()
	s := newSched(t, c, Limits{Global: 2, PerSession: 1, Resources: map[Resource]int64{Sandboxes: 1, Memory: 100}})
	cmd := submit(t, s, Task{ID: "cmd", Class: Triggered, Session: "b", Inner: true, Needs: map[Resource]int64{Sandboxes: 1}})[0]
	c.Advance(time.Second)
	inner := submit(t, s, Task{ID: "inner", Class: Interactive, Session: "c", Inner: true, Needs: map[Resource]int64{Sandboxes: 1}})[0]
	c.Advance(time.Second)
	head := submit(t, s, Task{ID: "head", Class: Interactive, Session: "a", Needs: map[Resource]int64{Sandboxes: 1}})[0]
	c.Advance(time.Second)
	same := submit(t, s, Task{ID: "same", Class: Interactive, Session: "a", Needs: map[Resource]int64{Memory: 54}})[0]
	if started(same) {
		t.Fatal("a later task of its session took the slot of a head held back by an earlier reservation")
	}
	lease(t, cmd).Release()
	lease(t, inner).Release()
	if !started(head) || started(same) {
		t.Fatalf("started %s, want head", startedIDs(head, same))
	}
	lease(t, head).Release()
	lease(t, same).Release()
}
