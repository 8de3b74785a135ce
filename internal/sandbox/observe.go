package sandbox

import (
	"context"
	"fmt"
	"sync"
)

// Observer is told about every execution (the audit log's exec.start and
// exec.end). Start runs before the command starts: an error refuses the
// execution (fail closed: an execution that cannot be recorded does not
// happen). End runs after it, with the Result or the setup error; its
// error is returned to the caller alongside the Result. End is called
// only when Start succeeded.
type Observer interface {
	Start(ctx context.Context, spec Spec) error
	End(ctx context.Context, spec Spec, res Result, runErr error) error
}

// GatedRunner is implemented by runtimes that can set a sandbox up while
// something else is still in progress: RunGated calls gate once the
// sandbox is ready, before the command starts, and starts no command
// when gate returns an error (Run's result is then that error, wrapped).
// A runtime may return a setup error without calling gate at all.
type GatedRunner interface {
	RunGated(ctx context.Context, spec Spec, gate func() error) (Result, error)
}

// An EarlyRunner is a GatedRunner that can also hand over the command's
// result as soon as it is known, before its sandbox is torn down (the
// result then lacks the output's bytes).
type EarlyRunner interface {
	RunEarly(ctx context.Context, spec Spec, gate func() error, early func(Result)) (Result, error)
}

// Observe returns a Runtime that reports every Run of rt to o. When rt is
// a GatedRunner, o.Start runs while the sandbox is being set up and the
// command waits for it: recording costs no time unless it is the slower
// of the two, and still happens before the command starts. When rt is
// an EarlyRunner, o.End runs while the sandbox is torn down, with the
// command's result, and Run returns once both are done.
func Observe(rt Runtime, o Observer) Runtime {
	if o == nil {
		return rt
	}
	return observed{rt: rt, o: o}
}

// ObserveReported is Observe that also hands the outcome to reported as
// soon as it is final and recorded: with an EarlyRunner once o.End has
// returned, while the sandbox is still being torn down; otherwise just
// before Run returns. reported is called once per Run, with what Run will
// return (when early: the result without the output's bytes, and without
// an error of the teardown alone, which only Run returns). The sandbox
// server answers its client from it; Run still returns only once the
// sandbox is gone.
func ObserveReported(rt Runtime, o Observer, reported func(Result, error)) Runtime {
	return observed{rt: rt, o: o, reported: reported}
}

type observed struct {
	rt       Runtime
	o        Observer
	reported func(Result, error)
}

func (x observed) Run(ctx context.Context, spec Spec) (Result, error) {
	if x.reported == nil {
		return x.run(ctx, spec, nil)
	}
	var once sync.Once
	report := func(res Result, err error) { once.Do(func() { x.reported(res, err) }) }
	res, err := x.run(ctx, spec, report)
	report(res, err)
	return res, err
}

func (x observed) run(ctx context.Context, spec Spec, report func(Result, error)) (Result, error) {
	if x.o == nil {
		return x.rt.Run(ctx, spec)
	}
	gr, ok := x.rt.(GatedRunner)
	if !ok {
		if err := x.o.Start(ctx, spec); err != nil {
			return Result{}, refused(err)
		}
		return x.end(ctx, spec)(x.rt.Run(ctx, spec))
	}
	started := make(chan error, 1)
	go func() { started <- x.o.Start(ctx, spec) }()
	var startErr error
	waited := false
	gate := func() error {
		if !waited {
			startErr, waited = <-started, true
		}
		return startErr
	}
	var ended chan error
	var res Result
	var err error
	if er, ok := x.rt.(EarlyRunner); ok {
		res, err = er.RunEarly(ctx, spec, gate, func(early Result) {
			ended = make(chan error, 1)
			go func() {
				err := x.o.End(ctx, spec, early, nil)
				if report != nil {
					report(early, endFailed(nil, err))
				}
				ended <- err
			}()
		})
	} else {
		res, err = gr.RunGated(ctx, spec, gate)
	}
	if ended != nil {
		// The outcome was recorded while the sandbox was torn down.
		return res, endFailed(err, <-ended)
	}
	if gate() != nil {
		// Nothing ran (or the runtime failed first); nothing was recorded.
		return res, refused(startErr)
	}
	return x.end(ctx, spec)(res, err)
}

func (x observed) end(ctx context.Context, spec Spec) func(Result, error) (Result, error) {
	return func(res Result, err error) (Result, error) {
		return res, endFailed(err, x.o.End(ctx, spec, res, err))
	}
}

// endFailed is the run's error after End: the run's own, else End's.
func endFailed(runErr, endErr error) error {
	if endErr != nil && runErr == nil {
		return fmt.Errorf("sandbox: recording the end of the execution failed: %w", endErr)
	}
	return runErr
}

func refused(err error) error {
	return fmt.Errorf("%w: refused: recording the execution failed: %w", ErrSetup, err)
}
