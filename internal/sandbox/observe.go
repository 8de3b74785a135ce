package sandbox

import (
	"context"
	"fmt"
)

// Observer is told about every execution (the audit log's exec.start and
// exec.end). Start runs before the sandbox is set up: an error refuses the
// execution (fail closed: an execution that cannot be recorded does not
// happen). End runs after it, with the Result or the setup error; its
// error is returned to the caller alongside the Result.
type Observer interface {
	Start(ctx context.Context, spec Spec) error
	End(ctx context.Context, spec Spec, res Result, runErr error) error
}

// Observe returns a Runtime that reports every Run of rt to o.
func Observe(rt Runtime, o Observer) Runtime {
	if o == nil {
		return rt
	}
	return observed{rt: rt, o: o}
}

type observed struct {
	rt Runtime
	o  Observer
}

func (x observed) Run(ctx context.Context, spec Spec) (Result, error) {
	if err := x.o.Start(ctx, spec); err != nil {
		return Result{}, fmt.Errorf("%w: refused: recording the execution failed: %w", ErrSetup, err)
	}
	res, err := x.rt.Run(ctx, spec)
	if endErr := x.o.End(ctx, spec, res, err); endErr != nil && err == nil {
		err = fmt.Errorf("sandbox: recording the end of the execution failed: %w", endErr)
	}
	return res, err
}
