package native

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// aheadRuntime runs every spec on a sandbox built ahead for it
// (PrepareNext), as a sandbox server's next request would.
type aheadRuntime struct{ *Runtime }

func (a aheadRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	_ = a.PrepareNext(spec, nil) // when it cannot, the run starts on demand
	return a.Runtime.Run(ctx, spec)
}
