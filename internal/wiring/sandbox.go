package wiring

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// RunSandbox runs one 'fluffy sandbox run' on the real backends.
func (*Core) RunSandbox(ctx context.Context, req sandboxrun.Request) (sandboxrun.Outcome, error) {
	r := sandboxrun.Runner{Backends: sandboxrun.Backends{Runtime: sandboxRuntime, Egress: startEgress}}
	return r.Run(ctx, req)
}

// NewSandboxHost returns the sandbox server's shared state, whose
// runtime is native: each run takes the sandbox built ahead for it, or
// starts one directly (docs/sandbox.md, "Start modes").
func (*Core) NewSandboxHost(u *userenv.Env) *sandboxrun.Host {
	log := u.Logger()
	return sandboxrun.NewHost(sandboxrun.HostOptions{Logger: log,
		NewRuntime: func(allowDegraded bool) (sandboxrun.AheadRuntime, error) {
			l, err := u.Config()
			if err != nil {
				return nil, err
			}
			slots, err := hostSlots(u, l.Config.Sched)
			if err != nil {
				return nil, err
			}
			rt, err := native.New(native.Options{Self: u.Self, AllowDegraded: allowDegraded, Logger: log})
			if err != nil {
				return nil, err
			}
			rt.Prepare()
			if slots != nil {
				return slotRuntime{AheadRuntime: rt, slots: slots}, nil
			}
			return rt, nil
		}})
}

// SandboxFacilities probes what the native sandbox finds on this host.
func (*Core) SandboxFacilities(ctx context.Context, u *userenv.Env) []sandbox.Facility {
	return native.Detect(ctx, native.DetectOptions{Self: u.Self})
}
