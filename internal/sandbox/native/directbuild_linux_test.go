//go:build amd64 || arm64

package native

import (
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

// TestBuildDirectFailureCleansUp: a start that fails while being built
// returns its error; its cleanup closes what was built rather than
// dereferencing the nil start it returns (a panic in the caller's
// process, the kernel's or the sandbox server's).
func TestBuildDirectFailureCleansUp(t *testing.T) {
	r := &Runtime{}
	// A seccomp filter of 3 bytes is no filter: PID 1's program refuses it.
	d, err := r.buildDirect(&nsinit.Config{Seccomp: []byte{1, 2, 3}}, nil, nil, nil, nil, directOpts{}, &nsinit.Tracer{})
	if err == nil || d != nil {
		t.Fatalf("a malformed filter: start %v, err %v; want an error", d, err)
	}
}

// TestLaunchFailureCleansUp: the same for the Go init's start, whose
// binary cannot be opened.
func TestLaunchFailureCleansUp(t *testing.T) {
	r := &Runtime{opts: Options{Init: "/nonexistent/fluffy-sandbox-init"}}
	sp, err := r.launch(nil, initIO{}, &nsinit.Tracer{})
	if err == nil || sp != nil {
		t.Fatalf("a missing init binary: %v, %v; want an error", sp, err)
	}
}
