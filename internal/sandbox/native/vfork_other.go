//go:build !amd64 && !arm64

package native

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"os/exec"
	"syscall"
)

// vforkSupported says whether this build starts the init by vfork (see
// vfork_linux.go); elsewhere os/exec starts it.
const vforkSupported = false

type vforkProcess struct{ cmd *exec.Cmd }

func (p *vforkProcess) Start() error                { return errors.New("vfork start: not on this architecture") }
func (p *vforkProcess) Wait() error                 { return errors.New("not started") }
func (p *vforkProcess) Pid() int                    { return 0 }
func (p *vforkProcess) Signal(syscall.Signal) error { return errors.New("not started") }
func (p *vforkProcess) Reusable() bool              { return true }

// The direct start needs the vfork start.
func (r *Runtime) directOK(*nsinit.Config, bool) bool { return false }

func (r *Runtime) startDirect(context.Context, *nsinit.Config, sandbox.Spec, sandbox.Result, func(sandbox.Result), func() error, *nsinit.Tracer, *nsinit.Status) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("direct start: not on this architecture")
}

// Ahead starts are direct starts (ahead_linux.go).
type aheadSlot struct{}
type aheadStart struct {
	withCg bool
	hold   *uppers.Hold
}

func (r *Runtime) PrepareNext(sandbox.Spec, func()) error {
	return fmt.Errorf("%w: no direct starts on this architecture", sandbox.ErrSetup)
}
func (r *Runtime) claimAhead(string) *aheadStart { return nil }
func (r *Runtime) useAhead(*aheadStart, *nsinit.Config, sandbox.Limits, bool, sandbox.Scratch) bool {
	return false
}
func (r *Runtime) runAhead(context.Context, *aheadStart, sandbox.Spec, sandbox.Result, func() error, func(sandbox.Result), *nsinit.Tracer, *nsinit.Status) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("direct start: not on this architecture")
}
func (r *Runtime) closeAhead()                        {}
func (r *Runtime) discardAheadLater(*aheadStart)      {}
func (r *Runtime) dropAhead(*aheadStart) *uppers.Hold { return nil }

// AheadStats: no ahead starts here.
func (r *Runtime) AheadStats() (used, discarded int64) { return 0, 0 }
