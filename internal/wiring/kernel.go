package wiring

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// runKernel is the kernel daemon: it listens on u's kernel socket, starts
// the sessions and approvals (StartKernel) and serves them with the
// daemon's own status and shutdown methods until ctx ends, a client asks
// it to stop, or, with o.Oneshot, it has had no client for
// kernel.idle_timeout. Another kernel serving the socket is
// ipc.ErrInUse; the audit log's start check failing is
// kernel.ErrAuditDamaged. With o.Serve it is the assistant daemon as well
// (startServe); ErrNothingToServe when it has nothing to serve.
func runKernel(ctx context.Context, u *userenv.Env, o kernel.DaemonOptions) error {
	l, err := u.Config()
	if err != nil {
		return err
	}
	if _, err := u.DataDir(); err != nil {
		return err
	}
	rd, _ := u.Getenv("XDG_RUNTIME_DIR")
	sock := ipc.SocketPath(rd, l.Config.Home)
	log := u.Logger().With("subsystem", "kernel")
	defer kernel.TuneGC(l.Config.Kernel, u.Getenv)()
	protectFromOOM(l.Config.Kernel, log)
	var idle time.Duration
	mode := kernel.ModeKernel
	switch {
	case o.Serve:
		mode = kernel.ModeServe
	case o.Oneshot:
		mode = kernel.ModeOnDemand
		idle = time.Duration(l.Config.Kernel.IdleTimeout)
	}
	if o.Serve {
		// What is missing is said before anything starts.
		if _, err := servePreflight(u, l); err != nil {
			return err
		}
	}
	// The socket first: a second kernel stops here, before it opens
	// fluffy.db or the audit log.
	ln, err := ipc.Listen(sock)
	if err != nil { // ipc.ErrInUse when another kernel serves it
		return err
	}
	// The server is built once the sessions are: until it exists there is
	// no client to publish to.
	var server atomic.Pointer[ipc.Server]
	mux := ipc.NewMux()
	// The web console's live pages read the sessions' events from its
	// hub, fed here beside the socket's clients.
	var hub *web.Hub
	if o.Serve && l.Config.Serve.Web.Listen != "" {
		hub = web.NewHub()
	}
	// The sessions, once StartKernel returns: the hub asks them where a
	// session's stored history ends (publishWeb).
	var sessions atomic.Pointer[kernel.Kernel]
	k, err := StartKernel(ctx, u, mux, KernelOptions{Logger: log, Publish: func(topic string, data any) {
		if hub != nil {
			publishWeb(hub, &sessions, data, log)
		}
		if s := server.Load(); s != nil {
			if _, err := s.Publish(topic, data); err != nil {
				log.Warn("publish", "topic", topic, "err", err)
			}
		}
	}})
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer k.Stop()
	sessions.Store(k.sessions)
	var front *serveFront
	if o.Serve {
		if front, err = startServe(ctx, u, k, mux, hub, log); err != nil {
			_ = ln.Close()
			return err
		}
		// Before k.Stop (deferred earlier, run later): the turns end or
		// are cancelled before the sessions close.
		defer front.stop()
		d, err := u.DataDir()
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer startBackups(ctx, d, l.Config.Backup, log.With("subsystem", "backup")).stop()
		defer startSkillImageGC(ctx, u, log.With("subsystem", "skillimage"))()
	}
	bi := buildinfo.Get()
	srv, err := ipc.NewServer(ipc.ServerOptions{Mux: mux, Name: "fluffy-kernel/" + bi.Version, Logger: log, Refusals: k,
		IdleTimeout: idle, IdleGrace: 2 * time.Duration(l.Config.Kernel.StartTimeout)})
	if err != nil {
		_ = ln.Close()
		return err
	}
	server.Store(srv)
	started := time.Now()
	if err := mux.Handle(kernel.MethodStatus, func(_ context.Context, r *ipc.Request) (any, error) {
		st := kernel.DaemonStatus{PID: os.Getpid(), Version: bi.Version, Commit: bi.Commit, GoVersion: bi.GoVersion,
			Protocol: ipc.Protocol, StartedAt: started.UTC(), UptimeMS: time.Since(started).Milliseconds(),
			Socket: sock, Home: l.Config.Home, Clients: srv.Conns(), Served: srv.Served(), Refused: k.Refused()}
		if idle > 0 {
			st.IdleTimeout = idle.String()
		}
		if front != nil {
			st.Serve = front.status(ctx)
		}
		if k.sched != nil {
			ss := k.sched.Status()
			st.Sched = &ss
		}
		st.Mode = mode
		if r.Peer != nil {
			st.Busy = k.busy(srv, r.Peer.ID)
		}
		return st, nil
	}); err != nil {
		_ = ln.Close()
		return err
	}
	stop := func() {
		if front != nil {
			front.stop()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if err := mux.Handle(kernel.MethodHandover, func(_ context.Context, r *ipc.Request) (any, error) {
		return k.handover(r, mode, srv, log, stop)
	}); err != nil {
		_ = ln.Close()
		return err
	}
	if err := mux.Handle(kernel.MethodShutdown, func(context.Context, *ipc.Request) (any, error) {
		log.Info("kernel stopping", "cause", "shutdown requested")
		go stop()
		return map[string]int{"pid": os.Getpid()}, nil
	}); err != nil {
		_ = ln.Close()
		return err
	}
	log.Info("kernel serving", "socket", sock, "pid", os.Getpid(), "version", bi.Version, "idle_timeout", idle)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		log.Info("kernel stopping", "cause", context.Cause(ctx))
		// The channels stop and the turns end while "fluffy approve"
		// still reaches the kernel.
		if front != nil {
			front.stop()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		err = <-served
	}
	switch {
	case errors.Is(err, ipc.ErrIdle):
		log.Info("kernel idle, exiting", "idle_timeout", idle)
		return nil
	case errors.Is(err, ipc.ErrServerClosed):
		return nil
	}
	return err
}
