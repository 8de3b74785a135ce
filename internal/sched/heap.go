package sched

import "container/heap"

// queue is a min-heap of entries by key, then submission order. An entry
// is in at most one queue at a time (entry.q, entry.idx).
type queue struct{ es []*entry }

func (q *queue) Len() int { return len(q.es) }
func (q *queue) Less(i, j int) bool {
	a, b := q.es[i], q.es[j]
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}
func (q *queue) Swap(i, j int) {
	q.es[i], q.es[j] = q.es[j], q.es[i]
	q.es[i].idx, q.es[j].idx = i, j
}
func (q *queue) Push(x any) {
	e := x.(*entry)
	e.idx = len(q.es)
	q.es = append(q.es, e)
}
func (q *queue) Pop() any {
	n := len(q.es) - 1
	e := q.es[n]
	q.es[n] = nil
	q.es = q.es[:n]
	e.idx = -1
	return e
}

func (q *queue) push(e *entry) {
	e.q = q
	heap.Push(q, e)
}

func (q *queue) head() *entry {
	if len(q.es) == 0 {
		return nil
	}
	return q.es[0]
}

// remove takes e out of whatever queue holds it.
func remove(e *entry) {
	if e.q == nil {
		return
	}
	heap.Remove(e.q, e.idx)
	e.q = nil
}

func before(a, b *entry) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}
