package kernel

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/config"
)

// gcNow returns the process's GC percent and memory limit without
// changing them.
func gcNow() (int, int64) {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p, debug.SetMemoryLimit(-1)
}

func TestTuneGC(t *testing.T) {
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for _, v := range vars {
				if v == k {
					return "50", true
				}
			}
			return "", false
		}
	}
	p0, l0 := gcNow()
	def := config.Default(nil).Kernel
	for _, tc := range []struct {
		name    string
		c       config.Kernel
		getenv  func(string) (string, bool)
		wantPct int
		wantLim int64
	}{
		{"defaults", def, env(), def.GCPercent, int64(def.MemoryLimit)},
		{"GOGC wins", def, env("GOGC"), p0, int64(def.MemoryLimit)},
		{"GOMEMLIMIT wins", def, env("GOMEMLIMIT"), def.GCPercent, l0},
		{"zero leaves both", config.Kernel{}, env(), p0, l0},
		{"off", config.Kernel{GCPercent: -1}, nil, -1, l0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := TuneGC(tc.c, tc.getenv)
			p, l := gcNow()
			restore()
			if p != tc.wantPct || l != tc.wantLim {
				t.Errorf("after TuneGC: percent %d limit %d; want %d %d", p, l, tc.wantPct, tc.wantLim)
			}
			if p, l := gcNow(); p != p0 || l != l0 {
				t.Errorf("restore left percent %d limit %d; want %d %d", p, l, p0, l0)
			}
		})
	}
	if def.GCPercent <= 100 || def.MemoryLimit <= 0 || int64(def.MemoryLimit) == math.MaxInt64 {
		t.Errorf("default kernel GC %d/%d: want a target above Go's and a finite limit", def.GCPercent, def.MemoryLimit)
	}
}
