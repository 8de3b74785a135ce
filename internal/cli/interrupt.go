package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
)

// Interrupted is the cause of a command's context when a signal cancelled
// it (Ctrl-C, kill): the command then exits 128+Signal, as a shell does.
type Interrupted = sandboxrun.Interrupted

// SignalContext is signal.NotifyContext with a cause that names the
// signal (*Interrupted), so that the exit status can say which one came.
// stop restores the default handling.
func SignalContext(parent context.Context, sigs ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			if n, ok := s.(syscall.Signal); ok {
				cancel(&Interrupted{Signal: n})
			} else {
				cancel(errors.New(s.String()))
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
