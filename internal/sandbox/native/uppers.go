package native

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
)

// Uppers lets at most one overlay use a change set's upper directory at
// a time (package uppers). Every sandbox whose workspace is an overlay on
// a change set holds its upper there from before the mount until the
// sandbox's last process has been reaped (its mount namespace, and with
// it the overlay, is gone then), whether the overlay is writable or
// read-only (Spec.WorkspaceReadOnly). A sandbox built ahead holds its
// upper while it waits; it is idle, and a run that needs the upper from
// another runtime has it discarded (a run of its own runtime takes it).
// A long-lived run (sandbox.Spec.Yield) is asked to end when another run
// needs its upper. Runtimes, native and container alike, share one
// Uppers through Options.Uppers (the kernel's sessions); a Runtime
// without one has its own.
type Uppers = uppers.Registry

// NewUppers returns an empty registry.
func NewUppers() *Uppers { return uppers.NewRegistry() }

// holdUpper holds a run's change set upper ("": none, nothing held),
// waiting while another sandbox has it mounted. When this runtime's
// sandbox built ahead is on that upper (or, for "", on none), it returns
// it with the hold it had (use it, or dropAhead); a sandbox built ahead
// by another runtime on it is discarded first.
func (r *Runtime) holdUpper(ctx context.Context, upper string) (*aheadStart, *uppers.Hold, error) {
	if upper == "" {
		return r.claimAhead(""), nil, nil
	}
	var a *aheadStart
	h, err := r.opts.Uppers.Acquire(ctx, upper, func() bool {
		a = r.claimAhead(upper)
		return a != nil
	})
	var busy *uppers.BusyError
	if errors.As(err, &busy) {
		return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: waiting for another sandbox on the change set %s to end: %w", upper, err)
	}
	if a != nil {
		return a, a.hold, nil
	}
	return nil, h, nil
}
