package native

import (
	"fmt"
	"io"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// writeTrace prints the merged parent and init marks as a table: each
// stage with the time it took since the previous mark, and the running
// total since the first, after the start mode. The init's marks are
// labelled "init:", or "pid 1:" for a direct start's (its child, before
// the reaper).
func writeTrace(w io.Writer, mode startMode, parent, init []nsinit.Mark) {
	fmt.Fprintf(w, "start mode: %s\n", mode)
	all := make([]nsinit.Mark, 0, len(parent)+len(init))
	for _, m := range parent {
		all = append(all, nsinit.Mark{Stage: "parent: " + m.Stage, At: m.At})
	}
	label := "init:   "
	if mode.direct() {
		label = "pid 1:  "
	}
	for _, m := range init {
		all = append(all, nsinit.Mark{Stage: label + m.Stage, At: m.At})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].At < all[j].At })
	if len(all) == 0 {
		return
	}
	t0, prev := all[0].At, all[0].At
	for _, m := range all {
		fmt.Fprintf(w, "%-44s %8.3f ms %8.3f ms\n", m.Stage, float64(m.At-prev)/float64(time.Millisecond), float64(m.At-t0)/float64(time.Millisecond))
		prev = m.At
	}
}

// writeCPU prints the CPU time of this process so far, of the init and of
// the command (user + system): what the sandbox costs, as opposed to the
// wall time above, which on a loaded host mostly measures waiting. A
// direct start's reaper does not report the command's apart: one line
// covers PID 1 before the reaper, the reaper and the command.
func writeCPU(w io.Writer, before *unix.Rusage, command [2]int64, direct bool) {
	var self, children unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &self) != nil || unix.Getrusage(unix.RUSAGE_CHILDREN, &children) != nil {
		return
	}
	ms := func(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }
	initU := children.Utime.Nano() - before.Utime.Nano() - command[0]
	initS := children.Stime.Nano() - before.Stime.Nano() - command[1]
	fmt.Fprintf(w, "cpu: this process so far   user %6.3f ms  system %6.3f ms\n", ms(self.Utime.Nano()), ms(self.Stime.Nano()))
	if direct {
		fmt.Fprintf(w, "cpu: sandbox (all of it)   user %6.3f ms  system %6.3f ms\n", ms(initU), ms(initS))
		return
	}
	fmt.Fprintf(w, "cpu: init                  user %6.3f ms  system %6.3f ms\n", ms(initU), ms(initS))
	fmt.Fprintf(w, "cpu: command               user %6.3f ms  system %6.3f ms\n", ms(command[0]), ms(command[1]))
}
