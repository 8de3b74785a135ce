package wiring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// busyBeside lists what the daemon is doing beside its sessions' runs that a
// stop would cut off: approvals waiting for an answer and clients (but the
// caller, peer) streaming events.
func (k *Kernel) busyBeside(srv *ipc.Server, peer uint64) []string {
	var out []string
	if k.broker != nil {
		for _, p := range k.broker.Pending("") {
			out = append(out, fmt.Sprintf("approval %s of session %s is waiting for an answer", p.ID, p.Session))
		}
	}
	for _, s := range srv.Streamers(peer) {
		out = append(out, fmt.Sprintf("client %q (pid %d) is following %s", s.Name, s.PID, strings.Join(s.Topics, ", ")))
	}
	return out
}

// busy is DaemonStatus.Busy: the sessions' runs, then busyBeside.
func (k *Kernel) busy(srv *ipc.Server, peer uint64) []string {
	var out []string
	if k.sessions != nil {
		out = k.sessions.Busy()
	}
	return append(out, k.busyBeside(srv, peer)...)
}

// handover is MethodHandover: an idle on-demand kernel stops for the
// "fluffy serve" asking (stop: the daemon's graceful stop, as
// MethodShutdown's); the sessions decide idleness under their own lock
// (kernel.Quiesce), so a turn that starts meanwhile either runs before
// the handover or is refused with ErrStopping, never lost halfway.
func (k *Kernel) handover(r *ipc.Request, mode string, srv *ipc.Server, log *slog.Logger, stop func()) (any, error) {
	var p kernel.HandoverParams
	if err := r.Bind(&p); err != nil {
		return nil, err
	}
	if mode != kernel.ModeOnDemand || k.sessions == nil {
		return nil, ipc.Errorf(ipc.CodeUnavailable, "this kernel (pid %d) runs as %s and hands over to nobody: stop it with 'fluffy kernel stop'", os.Getpid(), mode)
	}
	// What the sessions do is decided under their lock; approvals and
	// streaming clients are read just before. An approval is asked by a
	// running turn, which Quiesce sees, and a client that subscribes
	// after the read is told the kernel is shutting down and loses no work.
	err := k.sessions.Quiesce(k.busyBeside(srv, r.Peer.ID))
	var be *kernel.BusyError
	switch {
	case errors.As(err, &be):
		return nil, be.Wire()
	case errors.Is(err, kernel.ErrStopping):
		return nil, ipc.Errorf(ipc.CodeShuttingDown, "the kernel is stopping")
	case err != nil:
		return nil, err
	}
	cause := fmt.Sprintf("handed over to fluffy serve (pid %d)", p.PID)
	k.cause.Store(&cause)
	log.Info("kernel stopping", "cause", cause)
	go stop()
	return kernel.HandoverResult{PID: os.Getpid()}, nil
}
