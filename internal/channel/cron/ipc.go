package cron

import (
	"context"
	"errors"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// MethodRun fires a job now through the running daemon (`fluffy cron
// run NAME`): RunParams → Run. The daemon registers it with Register.
const MethodRun = "cron.run"

// RunParams name the job to fire.
type RunParams struct {
	Name string `json:"name"`
}

// IPC error codes of MethodRun beside ipc's own.
const (
	CodeUnknownJob = "unknown_job"
)

// Handler serves MethodRun on c. An unknown job is CodeUnknownJob, a
// schedule not running ipc.CodeUnavailable.
func (c *Cron) Handler() ipc.Handler {
	return func(ctx context.Context, r *ipc.Request) (any, error) {
		var p RunParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		run, err := c.RunNow(ctx, p.Name)
		switch {
		case errors.Is(err, ErrUnknownJob):
			return nil, ipc.Errorf(CodeUnknownJob, "%v", err)
		case errors.Is(err, ErrNotRunning):
			return nil, ipc.Errorf(ipc.CodeUnavailable, "%v", err)
		case err != nil:
			return nil, err
		}
		return run, nil
	}
}

// Register adds MethodRun to mux.
func (c *Cron) Register(mux *ipc.Mux) error { return mux.Handle(MethodRun, c.Handler()) }
