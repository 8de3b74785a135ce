package sched

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// HostSlots bound work shared by several processes of one user and data
// directory: the kernel's sandboxed commands and the sandbox server's
// runs (and 'fluffy sandbox run' in its own process) each hold one of N
// slots while they run. A slot is an exclusive flock on a file of its
// own in the directory, so the kernel releases it when its holder closes
// it or dies: a crashed process never keeps a slot.
//
// Acquire tries every slot; when all are held it blocks in flock on one
// of them (the process's own pick, so waiters spread), woken by the
// kernel when that slot is released. A Scheduler decides the order
// within one process; HostSlots only keep the sum over processes within
// N.
type HostSlots struct {
	dir     string
	n       int
	next    atomic.Uint32
	waiting atomic.Int32
}

// OpenHostSlots returns n slots kept in dir (created 0700). n must be
// positive.
func OpenHostSlots(dir string, n int) (*HostSlots, error) {
	if n <= 0 {
		return nil, fmt.Errorf("sched: %d host slots: want a positive number", n)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sched: host slots: %w", err)
	}
	return &HostSlots{dir: dir, n: n}, nil
}

// Acquire takes a slot, waiting until one is free or ctx ends. The
// returned func gives it back (once).
func (h *HostSlots) Acquire(ctx context.Context) (func(), error) {
	for {
		for i := range h.n {
			f, err := h.open(i)
			if err != nil {
				return nil, err
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
				return closer(f), nil
			}
			f.Close()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := h.open(int(h.next.Add(1)) % h.n)
		if err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		h.waiting.Add(1)
		go func() { done <- flockWait(f) }()
		select {
		case err := <-done:
			h.waiting.Add(-1)
			if err == nil {
				return closer(f), nil
			}
			f.Close()
			return nil, fmt.Errorf("sched: waiting for a host slot: %w", err)
		case <-ctx.Done():
			h.waiting.Add(-1)
			// The flock cannot be interrupted: the slot is given back
			// as soon as it is taken.
			go func() {
				<-done
				f.Close()
			}()
			return nil, ctx.Err()
		}
	}
}

// Waiting is the number of this process's Acquire calls blocked now.
func (h *HostSlots) Waiting() int { return int(h.waiting.Load()) }

func (h *HostSlots) open(i int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(h.dir, "slot."+strconv.Itoa(i)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sched: host slot: %w", err)
	}
	return f, nil
}

// flockWait blocks until f's exclusive lock is taken (EINTR retried).
func flockWait(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}

func closer(f *os.File) func() {
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			f.Close()
		}
	}
}
