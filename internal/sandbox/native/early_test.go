package native

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestRunEarly: the result handed over while the sandbox is torn down is
// the command's (status, signal, limits, the output cut at its limit),
// comes once and before RunEarly returns, and does not wait for a
// grandchild that kept the output open (the init kills it first).
func TestRunEarly(t *testing.T) {
	rt := newRuntime(t, Options{Init: smallInit(t)})
	for _, tc := range []struct {
		name   string
		script string
		code   int
		signal int
		hit    []sandbox.Limit
	}{
		{"exit status", "echo hi; exit 3", 3, 0, nil},
		{"output cut", "head -c 100000 /dev/zero | tr '\\0' x; exit 0", 0, 0, []sandbox.Limit{sandbox.LimitOutput}},
		{"killed by a signal", "kill -KILL $$", -1, int(syscall.SIGKILL), nil},
		{"a grandchild keeps the output open", "(sleep 30; echo late) & echo now; exit 5", 5, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			spec := sandbox.Spec{
				Argv:   []string{"/bin/sh", "-c", tc.script},
				Env:    []string{"PATH=/usr/bin:/bin"},
				Limits: sandbox.Limits{Output: 4096, Wall: 20 * time.Second},
				Stdout: &out,
			}
			var early []sandbox.Result
			res, err := rt.RunEarly(context.Background(), spec, nil, func(r sandbox.Result) { early = append(early, r) })
			if err != nil {
				t.Fatal(err)
			}
			if len(early) != 1 {
				t.Fatalf("early called %d times, want once (vfork start)", len(early))
			}
			e := early[0]
			for _, r := range []sandbox.Result{e, res} {
				if tc.signal != 0 {
					if r.Signal != tc.signal {
						t.Errorf("signal %d, want %d", r.Signal, tc.signal)
					}
				} else if r.ExitCode != tc.code {
					t.Errorf("exit %d, want %d", r.ExitCode, tc.code)
				}
				for _, h := range tc.hit {
					if !slices.Contains(r.Hit, h) {
						t.Errorf("limits hit %v, want %s", r.Hit, h)
					}
				}
				if len(tc.hit) == 0 && len(r.Hit) != 0 {
					t.Errorf("limits hit %v, want none", r.Hit)
				}
			}
			if e.Duration <= 0 || e.Duration > res.Duration {
				t.Errorf("early duration %v, final %v", e.Duration, res.Duration)
			}
			if e.Duration > 10*time.Second {
				t.Errorf("the early result waited %v (for the grandchild?)", e.Duration)
			}
			if strings.Contains(out.String(), "late") {
				t.Errorf("the grandchild outlived the command: %q", out.String())
			}
		})
	}
}
