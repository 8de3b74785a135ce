package nsinit

import "golang.org/x/sys/unix"

// Mark is one timestamp of a run's trace: the moment a stage ended, on the
// system-wide monotonic clock (the same in the parent and in the init, so
// the two traces merge).
type Mark struct {
	Stage string `json:"s"`
	At    int64  `json:"t"`
}

// Tracer records marks when On; the zero value records nothing.
type Tracer struct {
	On    bool
	Marks []Mark
}

// MonoNow reads CLOCK_MONOTONIC (Go's own monotonic reading is relative
// to each process's start, so it cannot be compared across processes).
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Mark records that stage has just ended.
func (t *Tracer) Mark(stage string) {
	if t.On {
		t.Marks = append(t.Marks, Mark{stage, MonoNow()})
	}
}
