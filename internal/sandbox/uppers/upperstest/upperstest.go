// Package upperstest holds what the runtimes' tests use to watch the
// rule of internal/sandbox/uppers from outside: the overlay mounts in a
// mount table, and the most of them seen at once.
package upperstest

import (
	"strings"
	"sync/atomic"
	"time"
)

// OverlayOptions returns, for each overlay mount of a mountinfo table
// (/proc/PID/mountinfo), its super options (upperdir, lowerdir, ...).
func OverlayOptions(mountinfo []byte) []map[string]string {
	var out []map[string]string
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if !strings.Contains(line, " - overlay ") {
			continue
		}
		opts := map[string]string{}
		for _, o := range strings.Split(line[strings.LastIndex(line, " ")+1:], ",") {
			k, v, _ := strings.Cut(o, "=")
			opts[k] = v
		}
		out = append(out, opts)
	}
	return out
}

// Most calls sample every 5 ms until the returned func is called, which
// returns the largest value it saw.
func Most(sample func() int) (stop func() int) {
	var most atomic.Int64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			most.Store(max(most.Load(), int64(sample())))
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(quit)
		<-done
		return int(most.Load())
	}
}
