package native

import (
	"bytes"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// lockedBuffer is a bytes.Buffer the runtime's copy writes while the
// test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// TestLiveOutput: with Spec.Live the live writer gets every byte of a
// long-lived process's output, past Limits.Output, and the Result keeps
// none; without it the writer stops at the limit.
func TestLiveOutput(t *testing.T) {
	rt := newRuntime(t, Options{})
	for _, live := range []bool{true, false} {
		var out lockedBuffer
		spec := sandbox.Spec{Argv: []string{"/bin/sh", "-c", "head -c 300000 /dev/zero"}, Env: sandbox.BaseEnv(""),
			Stdout: &out, Live: live, Limits: sandbox.Limits{Output: 100000}}
		res, err := rt.Run(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case live && (out.Len() != 300000 || len(res.Stdout) != 0 || res.HitLimit(sandbox.LimitOutput)):
			t.Errorf("live: the writer got %d bytes, the result kept %d, hit %v", out.Len(), len(res.Stdout), res.Hit)
		case !live && out.Len() > 100000+len(sandbox.TruncationMarker):
			t.Errorf("captured: the writer got %d bytes, want the limit", out.Len())
		}
	}
}
