package secret

import (
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Arena is memory outside the Go heap for what a sandboxed command's
// secrets pass through on their way in and out: the NAME=value strings
// of its environment, the C strings a runtime makes of them, and its raw
// output before redaction (sandbox.Spec.Scratch). It hands out pieces of
// a few mappings of its own (one per large request, small ones share a
// chunk, so a command costs the process a handful of mappings), locked
// as their pages are touched where the limit allows (mlock2
// MLOCK_ONFAULT) and left out of core dumps.
//
// Wipe zeroes and unmaps everything: nothing the arena handed out, nor a
// string made by String, may be used after it (the holder wipes once the
// command has ended and its output was copied, redacted). Safe for
// concurrent use.
type Arena struct {
	mu    sync.Mutex
	maps  [][]byte
	cur   []byte // the free rest of the last small chunk
	wiped bool
}

// arenaChunk is the size of the chunks small requests share.
const arenaChunk = 64 << 10

// Bytes returns n zeroed bytes outside the Go heap, valid until Wipe. It
// returns nil when the memory cannot be mapped, or after Wipe: callers
// then use the heap.
func (a *Arena) Bytes(n int) []byte {
	if a == nil {
		return nil
	}
	n = max(n, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wiped {
		return nil
	}
	if n > arenaChunk/4 {
		m := a.mapLocked(n)
		if m == nil {
			return nil
		}
		return m[:n:n]
	}
	if len(a.cur) < n {
		if a.cur = a.mapLocked(arenaChunk); a.cur == nil {
			return nil
		}
	}
	b := a.cur[:n:n]
	a.cur = a.cur[n:]
	return b
}

func (a *Arena) mapLocked(n int) []byte {
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	mlockOnFault(mem)
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP)
	a.maps = append(a.maps, mem)
	return mem
}

// String returns the concatenation of parts as a string whose bytes live
// in the arena (on the heap when the arena cannot map memory).
func (a *Arena) String(parts ...[]byte) string {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := a.Bytes(n)
	if b == nil {
		var s []byte
		for _, p := range parts {
			s = append(s, p...)
		}
		return string(s)
	}
	b = b[:0]
	for _, p := range parts {
		b = append(b, p...)
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Wipe zeroes and unmaps everything the arena handed out; later Bytes
// return nil.
func (a *Arena) Wipe() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, m := range a.maps {
		clear(m)
		errs = append(errs, unix.Munmap(m))
	}
	a.maps, a.cur, a.wiped = nil, nil, true
	return errors.Join(errs...)
}

// mlockOnFault locks b's pages as they are first touched (mlock2 with
// MLOCK_ONFAULT): an output buffer of megabytes costs only what the
// command wrote. Without the limit or the call the pages may be swapped.
func mlockOnFault(b []byte) {
	_, _, _ = unix.Syscall(unix.SYS_MLOCK2, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MLOCK_ONFAULT)
}
