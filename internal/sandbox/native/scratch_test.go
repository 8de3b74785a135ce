//go:build linux

package native

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// recScratch is a sandbox.Scratch that remembers what it handed out.
type recScratch struct {
	mu   sync.Mutex
	bufs [][]byte
}

func (s *recScratch) Bytes(n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := make([]byte, n)
	s.bufs = append(s.bufs, b)
	return b
}

// holds reports whether b lies inside one of the scratch's buffers.
func (s *recScratch) holds(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, m := range s.bufs {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		if p >= lo && p+uintptr(len(b)) <= lo+uintptr(cap(m)) {
			return true
		}
	}
	return false
}

// holdsString reports whether a buffer holds s followed by a NUL (a C
// string made there).
func (s *recScratch) holdsString(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.bufs, func(m []byte) bool { return bytes.Equal(m, append([]byte(v), 0)) })
}

// With a Scratch, the direct start makes the command's environment there
// and captures its output there (cut at Limits.Output, marker included),
// so a secret's value in either never lands on the heap.
func TestScratchHoldsEnvAndOutput(t *testing.T) {
	rt := newRuntime(t, Options{})
	sc := &recScratch{}
	token := "TOKEN=f00dfeedf00dfeed"
	res := run(t, rt, sandbox.Spec{
		Argv:    []string{"/bin/sh", "-c", "printenv TOKEN; printenv TOKEN >&2; head -c 200 /dev/zero | tr '\\0' x"},
		Env:     []string{"PATH=/usr/bin:/bin", token},
		Limits:  sandbox.Limits{Output: 64},
		Scratch: sc,
	})
	if !strings.HasPrefix(string(res.Stdout), "f00dfeedf00dfeed\nxxx") || !strings.HasSuffix(string(res.Stdout), sandbox.TruncationMarker) {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if string(res.Stderr) != "f00dfeedf00dfeed\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
	if !sc.holds(res.Stdout) || !sc.holds(res.Stderr) {
		t.Error("the output was not captured in the scratch memory")
	}
	if !sc.holdsString(token) {
		t.Error("the environment's C string was not made in the scratch memory")
	}
}
