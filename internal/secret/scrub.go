package secret

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// scrubSignalStacks overwrites the register state the kernel saved on
// this process's signal stacks. A signal that interrupts a thread while a
// value is in its vector registers (a copy of 17 to 32 bytes goes through
// two of them) leaves the value in the signal frame on that thread's
// signal stack, which nothing zeroes: the next signal on the thread
// writes its frame over the same bytes. So every thread is sent SIGURG,
// the signal the Go runtime preempts with and ignores when it is not
// asking for it, and scrubSignalStacks waits (up to wait) until no thread
// still has it pending. A thread that has not run since it held the value
// saves it again; one that has run since saves what it holds now.
func scrubSignalStacks(wait time.Duration) {
	// This thread's signal saves zeros: a copy of 256 bytes goes
	// through all sixteen vector registers.
	clearVectors(make([]byte, 512))
	pid := unix.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if unix.Tgkill(pid, tid, unix.SIGURG) == nil {
			tids = append(tids, tid)
		}
	}
	deadline := time.Now().Add(wait)
	for _, tid := range tids {
		for urgPending(tid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// urgPending reports whether thread tid has SIGURG pending (its SigPnd
// mask in /proc); false when the thread is gone.
func urgPending(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return false
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("SigPnd:"))
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(string(v)), 16, 64)
		return err == nil && mask&(1<<(uint(unix.SIGURG)-1)) != 0
	}
	return false
}

// clearVectors copies the zeros of z's first half over its second: the
// runtime's copy of 129 to 256 bytes loads every one of the sixteen
// vector registers (X0-X15), which then hold zeros.
//
//go:noinline
func clearVectors(z []byte) { copy(z[len(z)/2:], z[:len(z)/2]) }
