package kernel

import (
	"runtime/debug"

	"github.com/fluffy-agent/fluffy/internal/config"
)

// TuneGC sets the garbage collector of the kernel process from its
// configuration (kernel.gc_percent, kernel.memory_limit): the kernel is a
// long-lived daemon whose live heap is small, so Go's default target
// (collect when the heap doubles, at least every 4 MB) collects every few
// hundred tool calls and slows the calls each collection overlaps. A
// variable GOGC or GOMEMLIMIT in getenv (the process's environment, which
// the runtime already applied) wins over the configuration. Call it once,
// at the kernel process's start-up; the fast-path benchmark applies it
// the same way. The returned func restores the previous settings.
func TuneGC(c config.Kernel, getenv func(string) (string, bool)) (restore func()) {
	set := func(k string) bool {
		if getenv == nil {
			return false
		}
		_, ok := getenv(k)
		return ok
	}
	prevPct, prevLim := -2, int64(-1)
	if c.GCPercent != 0 && !set("GOGC") {
		prevPct = debug.SetGCPercent(c.GCPercent)
	}
	if c.MemoryLimit > 0 && !set("GOMEMLIMIT") {
		prevLim = debug.SetMemoryLimit(int64(c.MemoryLimit))
	}
	return func() {
		if prevPct != -2 {
			debug.SetGCPercent(prevPct)
		}
		if prevLim >= 0 {
			debug.SetMemoryLimit(prevLim)
		}
	}
}
