package native

import (
	"fmt"
	"io"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// mark is one timestamp of a run's trace: the moment a stage ended, on the
// system-wide monotonic clock (the same in the parent and in the init, so
// the two traces merge).
type mark struct {
	Stage string `json:"s"`
	At    int64  `json:"t"`
}

// tracer records marks when enabled; the zero value records nothing.
type tracer struct {
	on    bool
	marks []mark
}

// monoNow reads CLOCK_MONOTONIC (Go's own monotonic reading is relative
// to each process's start, so it cannot be compared across processes).
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (t *tracer) mark(stage string) {
	if t.on {
		t.marks = append(t.marks, mark{stage, monoNow()})
	}
}

// writeTrace prints the merged parent and init marks as a table: each
// stage with the time it took since the previous mark, and the running
// total since the first.
func writeTrace(w io.Writer, parent, init []mark) {
	all := make([]mark, 0, len(parent)+len(init))
	for _, m := range parent {
		all = append(all, mark{"parent: " + m.Stage, m.At})
	}
	for _, m := range init {
		all = append(all, mark{"init:   " + m.Stage, m.At})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].At < all[j].At })
	if len(all) == 0 {
		return
	}
	t0, prev := all[0].At, all[0].At
	for _, m := range all {
		fmt.Fprintf(w, "%-40s %8.3f ms %8.3f ms\n", m.Stage, float64(m.At-prev)/float64(time.Millisecond), float64(m.At-t0)/float64(time.Millisecond))
		prev = m.At
	}
}
