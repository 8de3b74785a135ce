//go:build linux

package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// TestStartModesKeepSecretOffHeap runs a command that gets a secret's
// value in its environment, or on its stdin from a bytes.Reader over the
// value as a stdin use gives it, under each start mode, with a
// secret.Arena as the spec's Scratch as the kernel gives it, and
// searches this process's whole memory (/proc/self/mem) for the value:
// found while the arena holds it (the search works), nowhere once the
// arena is wiped. No garbage collection runs in between, so a copy that
// passed through the heap (the Go init's configuration frame, a copy
// buffer of the stdin or the output) would still be there. The value
// exists unmasked only in the arena: the test keeps it XORed with
// swapMask.
func TestStartModesKeepSecretOffHeap(t *testing.T) {
	for _, want := range []startMode{modeAhead, modeDirect, modeVfork, modeExec, modeStage1} {
		for _, via := range []string{"env", "stdin"} {
			t.Run(want.String()+"/"+via, func(t *testing.T) {
				rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: !want.direct()})
				defer rt.Close()
				setStage1(rt, want == modeStage1)
				rt.noVfork = want == modeExec || want == modeStage1
				if want.direct() && !rt.directOK(&nsinit.Config{}, false) {
					t.Skip("no direct starts on this host")
				}
				if want == modeVfork && !vforkSupported {
					t.Skip("no vfork starts on this architecture")
				}
				run := rt.Run
				if want == modeAhead {
					run = aheadRuntime{rt}.Run
				}
				arena := &secret.Arena{}
				defer func() { _ = arena.Wipe() }()
				env, masked := arenaSecretEnv(t, arena, "TOKEN=")
				spec := sandbox.Spec{
					Argv:    []string{"/bin/sh", "-c", "printenv TOKEN"},
					Env:     []string{"PATH=/usr/bin:/bin", env},
					Limits:  sandbox.Limits{Output: 4096},
					Scratch: arena,
				}
				if via == "stdin" {
					spec.Argv = []string{"/bin/sh", "-c", "cat; echo"}
					spec.Env = spec.Env[:1]
					spec.Stdin = bytes.NewReader(unsafe.Slice(unsafe.StringData(env[len("TOKEN="):]), len(masked)))
				}
				res, err := run(context.Background(), spec)
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("run: exit %d, stderr %q, %v", res.ExitCode, res.Stderr, err)
				}
				if res.StartMode != want.String() {
					t.Fatalf("the run took the %s start, want %s", res.StartMode, want)
				}
				if len(res.Stdout) != len(masked)+1 || countMasked(res.Stdout, masked, len(res.Stdout)) != 1 {
					t.Fatalf("the command printed %d bytes, not the value", len(res.Stdout))
				}
				if n := searchOwnMemory(t, masked); n == 0 {
					t.Fatal("the value is not found while the arena holds it: the search finds nothing")
				}
				if err := arena.Wipe(); err != nil {
					t.Fatal(err)
				}
				if n := searchOwnMemory(t, masked); n != 0 {
					t.Errorf("the value is in this process's memory %d time(s) after the arena was wiped: a copy crossed the heap", n)
				}
			})
		}
	}
}

// arenaSecretEnv returns prefix and a random value of 32 hex digits as a
// string in arena, and the value XORed with swapMask. The value is made
// in a mapping of its own, zeroed and unmapped before the return.
func arenaSecretEnv(t *testing.T, arena *secret.Arena, prefix string) (env string, masked []byte) {
	t.Helper()
	plain, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	v := plain[:32]
	if _, err := rand.Read(v); err != nil {
		t.Fatal(err)
	}
	masked = make([]byte, len(v))
	for i := range v {
		v[i] = "0123456789abcdef"[v[i]&15]
		masked[i] = v[i] ^ swapMask
	}
	env = arena.String([]byte(prefix), v)
	clear(plain)
	if err := unix.Munmap(plain); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(env, prefix) || len(env) != len(prefix)+len(masked) {
		t.Fatal("the arena could not hold the variable")
	}
	return env, masked
}

// countMasked counts the places in b before limit where the value that
// masked hides (each byte XORed with swapMask) begins.
func countMasked(b, masked []byte, limit int) int {
	n := 0
	for i := 0; i < limit && i+len(masked) <= len(b); i++ {
		k := 0
		for k < len(masked) && b[i+k]^swapMask == masked[k] {
			k++
		}
		if k == len(masked) {
			n++
		}
	}
	return n
}

// searchOwnMemory counts the occurrences of the value masked hides in
// every readable mapping of this process.
func searchOwnMemory(t *testing.T, masked []byte) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Skipf("cannot read this process's memory (%v)", err)
	}
	defer mem.Close()
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	// Chunks overlap by len(masked)-1 bytes; a match counts in the
	// chunk where it begins before the overlap, or in the last one.
	step := uint64(chunk - len(masked) + 1)
	found := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(maps)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || (len(f) >= 6 && strings.HasPrefix(f[5], "[v")) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		for off := start; off < end; off += step {
			n := min(uint64(chunk), end-off)
			k, _ := mem.ReadAt(buf[:n], int64(off))
			if k <= 0 {
				break
			}
			limit := int(step)
			if off+uint64(k) >= end {
				limit = k
			}
			found += countMasked(buf[:k], masked, limit)
			if off+uint64(k) >= end {
				break
			}
		}
	}
	return found
}

// The search finds a value on the heap (it would catch a copy there).
func TestSearchOwnMemoryFindsHeapCopy(t *testing.T) {
	masked := bytes.Repeat([]byte{'7' ^ swapMask, 'e' ^ swapMask}, 16)
	onHeap := make([]byte, len(masked))
	for i := range masked {
		onHeap[i] = masked[i] ^ swapMask
	}
	if n := searchOwnMemory(t, masked); n == 0 {
		t.Fatal("a value on the heap was not found")
	}
	clear(onHeap)
}
