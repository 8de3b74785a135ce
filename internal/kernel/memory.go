package kernel

import (
	"errors"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// ErrOverloaded is wrapped by Create's error when Options.Admit refused a
// new session (the daemon is short of memory); running sessions go on.
var ErrOverloaded = errors.New("kernel: too busy for a new session")

// MemoryAdmit returns an Options.Admit that refuses new sessions while
// the process's memory, as read (ProcessMemory in production), is above
// high. high <= 0 admits all.
func MemoryAdmit(high int64, read func() int64) func() error {
	if high <= 0 {
		return nil
	}
	return func() error {
		if m := read(); m > high {
			return fmt.Errorf("%w: the daemon holds %s, above kernel.memory_high (%s); new sessions are refused until running ones finish (docs/troubleshooting.md#the-daemon-refuses-new-sessions)",
				ErrOverloaded, units.Size(m).Approx(), units.Size(high).Approx())
		}
		return nil
	}
}

// memorySamples are the runtime metrics ProcessMemory reads.
var memorySamples = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// ProcessMemory is what the Go runtime holds from the system (mapped,
// minus what it has given back): the memory GOMEMLIMIT bounds, and what
// grows under a flood of sessions.
func ProcessMemory() int64 {
	s := make([]metrics.Sample, len(memorySamples))
	for i, n := range memorySamples {
		s[i].Name = n
	}
	metrics.Read(s)
	var v [2]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return int64(v[0] - min(v[0], v[1]))
}

// Own and sandboxed processes' oom_score_adj with kernel.oom_protect.
const (
	// OOMScoreDaemon is the kernel process's: Linux's OOM killer picks
	// it only after everything with a higher score.
	OOMScoreDaemon = -500
	// OOMScoreSandbox is a sandbox's: killed first.
	OOMScoreSandbox = 1000
)

// SetOOMScoreAdj writes pid's oom_score_adj (0: this process). Lowering
// it needs CAP_SYS_RESOURCE: without it the error wraps os.ErrPermission
// and the score stays as it was.
func SetOOMScoreAdj(pid, v int) error {
	p := "/proc/self/oom_score_adj"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(v)), 0); err != nil {
		return fmt.Errorf("kernel: set %s to %d: %w", p, v, err)
	}
	return nil
}

// OOMScoreAdj reads pid's oom_score_adj (0: this process).
func OOMScoreAdj(pid int) (int, error) {
	p := "/proc/self/oom_score_adj"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("kernel: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("kernel: %s: %w", p, err)
	}
	return v, nil
}
