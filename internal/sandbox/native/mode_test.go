package native

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// TestStartModeTrace: a traced run names, first, the start mode it took,
// and each way of forcing a mode takes that one; the Go init's marks are
// labelled as a direct start's only for the direct modes.
func TestStartModeTrace(t *testing.T) {
	for _, want := range []startMode{modeDirect, modeVfork, modeExec, modeStage1} {
		t.Run(want.String(), func(t *testing.T) {
			var trace bytes.Buffer
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: want != modeDirect, Trace: &trace})
			defer rt.Close()
			setStage1(rt, want == modeStage1)
			rt.noVfork = want == modeExec
			rt.detect()
			if want == modeDirect && !rt.directOK(&nsinit.Config{}, false) {
				t.Skip("no direct starts on this host")
			}
			if want == modeVfork && !vforkSupported {
				t.Skip("no vfork starts on this architecture")
			}
			res, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("run: %+v, %v", res, err)
			}
			first, rest, _ := strings.Cut(trace.String(), "\n")
			if first != "start mode: "+want.String() {
				t.Errorf("the trace starts with %q, want the mode %q", first, want)
			}
			if got := strings.Contains(rest, "\npid 1:  "); got != want.direct() {
				t.Errorf("PID 1's marks labelled as a direct start's: %v, want %v:\n%s", got, want.direct(), rest)
			}
		})
	}
}
