package secret

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const sigChildEnv = "FLUFFY_SECRET_SIGSTACK_SEED"

// pattern is the test's stand-in for a value: 32 bytes made from seed,
// so the searched process never holds it but in the registers it copies
// it through.
func pattern(seed byte) []byte {
	b := make([]byte, 32)
	for i := range b {
		b[i] = seed*31 + byte(i*17) + byte(i*i) | 0x80
	}
	return b
}

// TestScrubSignalStacks plants a value where a signal leaves it: a
// process copies it (through two vector registers), zeroes both copies,
// and is interrupted; the kernel saves the registers, value and all, on
// the thread's signal stack, where the search finds it. After
// scrubSignalStacks, called from another thread, it is gone.
func TestScrubSignalStacks(t *testing.T) {
	if s := os.Getenv(sigChildEnv); s != "" {
		seed, _ := strconv.Atoi(s)
		sigChild(byte(seed))
		return
	}
	seed := byte(time.Now().UnixNano()%200) + 1
	in, expect, pid := startChild(t, "TestScrubSignalStacks", sigChildEnv+"="+strconv.Itoa(int(seed)))
	v := pattern(seed)
	expect("planted")
	if n := searchMemory(t, pid, v); n == 0 {
		t.Fatal("the signal frame holds no copy: nothing for the scrub to remove (the planting does not work on this CPU)")
	}
	fmt.Fprintln(in, "scrub")
	expect("scrubbed")
	if n := searchMemory(t, pid, v); n != 0 {
		t.Errorf("after the scrub the value is in the process's memory %d times", n)
	}
}

// sigChild is the searched process.
func sigChild(seed byte) {
	planted := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		src, dst := pattern(seed), make([]byte, 32)
		copyThrough(dst, src)
		// Zeroed byte by byte: clear would zero X0 first.
		for i := len(src) - 1; i >= 0; i-- {
			src[i], dst[i] = 0, 0
		}
		_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.SIGURG)
		// The thread goes on to other work: its registers no longer
		// hold the value, its signal stack still does.
		clearVectors(make([]byte, 512))
		close(planted)
		select {} // keeps the thread, locked and idle
	}()
	<-planted
	fmt.Println("planted")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		panic(err)
	}
	scrubSignalStacks(time.Second)
	fmt.Println("scrubbed")
	_, _ = io.Copy(io.Discard, in)
	os.Exit(0)
}

// copyThrough is the runtime's copy, of 17 to 32 bytes through X0 and X1
// (a copy of a length the compiler knows is made inline, through one).
//
//go:noinline
func copyThrough(dst, src []byte) { copy(dst, src) }
