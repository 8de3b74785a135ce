package native

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// writeTrace prints the merged parent and init marks as a table: each
// stage with the time it took since the previous mark, and the running
// total since the first.
func writeTrace(w io.Writer, parent, init []nsinit.Mark) {
	all := make([]nsinit.Mark, 0, len(parent)+len(init))
	for _, m := range parent {
		all = append(all, nsinit.Mark{Stage: "parent: " + m.Stage, At: m.At})
	}
	for _, m := range init {
		all = append(all, nsinit.Mark{Stage: "init:   " + m.Stage, At: m.At})
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
