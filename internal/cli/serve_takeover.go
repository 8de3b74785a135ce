package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// takeoverWait bounds how long "fluffy serve" waits for the socket once
// the kernel holding it agreed to hand over: its process exits and
// another on-demand kernel started meanwhile hands over too.
const takeoverWait = 10 * time.Second

// takeoverPoll is how often "fluffy serve --wait" asks a busy kernel
// again, and how often the socket is tried while its holder exits.
const (
	takeoverPoll = 500 * time.Millisecond
	exitPoll     = 50 * time.Millisecond
)

// errNoHolder: nobody answers on the socket any more; try to listen again.
var errNoHolder = errors.New("no kernel answers on the socket")

// takeOver asks the kernel holding the socket to hand over to this
// "fluffy serve" (docs/serve.md#an-on-demand-kernel-in-the-way) and waits
// for its process to exit. Another serve daemon, or a kernel started by
// hand, is refused with its pid; a busy on-demand kernel is refused with
// what it is doing, or, with wait, asked again until it is idle or ctx
// ends. It returns nil once the holder has gone (or none answered).
func (a *App) takeOver(ctx context.Context, sock string, wait bool) error {
	c, err := a.dialRunning(ctx)
	if err != nil {
		return err
	}
	if c == nil {
		return errNoHolder
	}
	defer c.Close()
	pid := int(c.ServerCred().PID)
	var st kernel.DaemonStatus
	if err := c.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
		if gone(err) {
			return errNoHolder
		}
		return fmt.Errorf("ask the kernel on %s what it is: %w", sock, err)
	}
	switch {
	case st.Mode == kernel.ModeServe || st.Mode == "" && st.Serve != nil:
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("another 'fluffy serve' (pid %d) is serving %s", pid, sock)}
	case st.Mode != kernel.ModeOnDemand:
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("a kernel started by hand (pid %d) is serving %s: stop it with 'fluffy kernel stop', then start 'fluffy serve' again", pid, sock)}
	}
	log := a.Logger()
	waiting := ""
	for {
		var res kernel.HandoverResult
		err := c.Call(ctx, kernel.MethodHandover, kernel.HandoverParams{PID: os.Getpid()}, &res)
		reasons := kernel.BusyReasons(err)
		switch {
		case err == nil, errors.Is(err, ipc.ErrShuttingDown):
			// Stopping now, for us or on its own.
		case reasons != nil && wait:
			if r := strings.Join(reasons, "; "); r != waiting {
				waiting = r
				log.Info("waiting for the on-demand kernel to be idle", "pid", pid, "busy", r)
			}
			select {
			case <-ctx.Done():
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("stopped waiting for the on-demand kernel (pid %d) to be idle", pid)}
			case <-time.After(takeoverPoll):
			}
			continue
		case reasons != nil:
			return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the on-demand kernel (pid %d) serving %s is busy: %s\n"+
				"either stop it with 'fluffy kernel stop' (its sessions stay resumable), or run 'fluffy serve --wait' to take over once it is idle",
				pid, sock, termsafe.String(strings.Join(reasons, "; ")))}
		case gone(err):
		case errors.Is(err, ipc.ErrUnknownMethod):
			return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the on-demand kernel (pid %d) serving %s is of an older fluffy that cannot hand over: stop it with 'fluffy kernel stop', then start 'fluffy serve' again", pid, sock)}
		default:
			return fmt.Errorf("ask the kernel (pid %d) to hand over: %w", pid, err)
		}
		break
	}
	if err := waitExit(ctx, c, pid); err != nil {
		return err
	}
	log.Info(fmt.Sprintf("took over from the on-demand kernel pid %d", pid), "socket", sock)
	return nil
}

// gone reports errors of a kernel that went away under the call.
func gone(err error) bool {
	return errors.Is(err, ipc.ErrClosed) || errors.Is(err, ipc.ErrShuttingDown)
}

// waitExit waits for the kernel's connection to close and its process to
// exit (its sessions closed and kernel.stop recorded), within
// takeoverWait.
func waitExit(ctx context.Context, c *ipc.Client, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, takeoverWait)
	defer cancel()
	select {
	case <-c.Done():
	case <-ctx.Done():
	}
	for !procGone(pid) {
		select {
		case <-ctx.Done():
			return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("the on-demand kernel (pid %d) agreed to hand over but has not exited within %v; see its log, or kill it (kill %d)", pid, takeoverWait, pid)}
		case <-time.After(exitPoll):
		}
	}
	return nil
}

// procGone reports whether process pid has exited: no such process, or a
// zombie nobody reaped yet.
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
