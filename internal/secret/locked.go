package secret

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// locked is a value outside the Go heap: an anonymous mapping of its own,
// locked in memory where the process may (RLIMIT_MEMLOCK), left out of
// core dumps, zeroed and unmapped by free. The garbage collector never
// moves or copies it.
type locked struct {
	b      []byte // the value, a prefix of mem
	mem    []byte
	pinned bool // mlock succeeded
}

// newLocked copies v into a new locked region. The caller zeroes v.
func newLocked(v []byte) (*locked, error) {
	size := max(len(v), 1)
	page := unix.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("secret: mapping memory for a value: %w", err)
	}
	l := &locked{mem: mem, b: mem[:len(v)]}
	// Without the privilege or the limit the value still lives outside
	// the heap; it may then be swapped out.
	l.pinned = unix.Mlock(mem) == nil
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP)
	copy(l.b, v)
	return l, nil
}

// free zeroes and unmaps the region; the value is gone.
func (l *locked) free() error {
	if l == nil || l.mem == nil {
		return nil
	}
	clear(l.mem)
	var errs []error
	if l.pinned {
		errs = append(errs, unix.Munlock(l.mem))
	}
	errs = append(errs, unix.Munmap(l.mem))
	l.mem, l.b = nil, nil
	return errors.Join(errs...)
}
