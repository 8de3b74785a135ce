package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/serve"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// ErrNothingToServe: "fluffy serve" found no assistant workspace, or
// nothing configured to serve; the message says what is missing and how
// to start.
var ErrNothingToServe = errors.New("nothing to serve")

// channelDeps are what a channel's constructor gets from the daemon.
type channelDeps struct {
	log *slog.Logger
	// state is the daemon's directory for channels' own state (nonces,
	// attachments, history): each channel gets state/<name>.
	state string
	now   func() time.Time
}

// serveChannels builds the channels the serve: section configures, in a
// stable order. Each channel package's constructor is called here, and
// only here (internal/channel/<name>: New(cfg, Options)); checkServe runs
// their configuration checks.
func serveChannels(_ *config.Config, _ channelDeps) ([]channel.Channel, error) {
	return nil, nil
}

// channelChecks are the channel packages' configuration checks (their
// Check functions), for "fluffy serve --check".
func channelChecks(_ *config.Config) []error { return nil }

// assistantWorkspace is serve.workspace with a leading ~ expanded;
// default ~/.fluffy/workspace.
func assistantWorkspace(u *userenv.Env, c *config.Config) (string, error) {
	ws := c.Serve.Workspace
	if ws == "" {
		ws = "~/.fluffy/workspace"
	}
	if ws == "~" || strings.HasPrefix(ws, "~/") {
		home, ok := u.Getenv("HOME")
		if !ok || home == "" {
			return "", fmt.Errorf("%w: serve.workspace %q: $HOME is not set", userenv.ErrUsage, ws)
		}
		ws = filepath.Join(home, strings.TrimPrefix(ws, "~"))
	}
	return u.Abs(ws), nil
}

// AssistantWorkspace is the assistant's workspace directory of u's
// configuration (serve.workspace), for "fluffy serve init".
func AssistantWorkspace(u *userenv.Env) (string, error) {
	l, err := u.Config()
	if err != nil {
		return "", err
	}
	return assistantWorkspace(u, &l.Config)
}

// CheckServe validates the configuration "fluffy serve" would run:
// the configuration itself (load errors name file:line), each channel's
// own check, the routes naming channels that exist, approvers set when a
// route exists and none of them an event source. It returns every
// problem found.
func CheckServe(u *userenv.Env) []error {
	l, err := u.Config()
	if err != nil {
		return []error{err}
	}
	c := &l.Config
	var errs []error
	if _, _, err := servePreflight(u, c, slog.New(slog.DiscardHandler)); err != nil {
		errs = append(errs, err)
	}
	for _, a := range []struct{ key, addr string }{{"serve.health", c.Serve.Health}, {"serve.listen", c.Serve.Listen}} {
		if a.addr == "" {
			continue
		}
		if err := checkAddr(a.addr, a.key == "serve.health"); err != nil {
			errs = append(errs, located(l, a.key, fmt.Errorf("%s: %w", a.key, err)))
		}
	}
	errs = append(errs, channelChecks(c)...)
	chans, err := serveChannels(c, channelDeps{log: slog.New(slog.DiscardHandler), now: time.Now})
	if err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for _, ch := range chans {
		names[ch.Name()] = true
	}
	routes := []struct {
		key string
		r   config.Route
	}{}
	for i, r := range c.Approval.Route {
		routes = append(routes, struct {
			key string
			r   config.Route
		}{fmt.Sprintf("approval.route[%d]", i), r})
	}
	if r := c.Serve.HeartbeatReport; r.Channel != "" {
		routes = append(routes, struct {
			key string
			r   config.Route
		}{"serve.heartbeat_report", r})
	}
	for _, x := range routes {
		if !names[x.r.Channel] {
			key, _, _ := strings.Cut(x.key, "[")
			errs = append(errs, located(l, key, fmt.Errorf("%s: no channel named %q is configured (channels: %s)", x.key, x.r.Channel, nameList(names))))
		}
	}
	if len(c.Approval.Route) > 0 && len(c.Approval.Approvers) == 0 {
		errs = append(errs, located(l, "approval.route", errors.New("approval.approvers: approval.route is set but nobody may answer: name the approvers' principals")))
	}
	for i, p := range c.Approval.Approvers {
		if serve.Headless(p) {
			errs = append(errs, located(l, "approval.approvers", fmt.Errorf("approval.approvers[%d]: %q is an event source, not a person; it can never approve", i, p)))
		}
	}
	return errs
}

// located prefixes err with the file and line that set key (or its
// first member), when a file did.
func located(l *config.Loaded, key string, err error) error {
	for _, k := range []string{key, key + ".channel"} {
		if o, ok := l.Origins[k]; ok && o.File != "" {
			return fmt.Errorf("%s:%d:%d: %w", o.File, o.Line, o.Column, err)
		}
	}
	return err
}

func nameList(names map[string]bool) string {
	if len(names) == 0 {
		return "none"
	}
	var out []string
	for n := range names {
		out = append(out, n)
	}
	return strings.Join(out, ", ")
}

// checkAddr checks a host:port (loopback only, when loopback) or, for
// the health endpoint, unix:/path.
func checkAddr(addr string, health bool) error {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if !health {
			return fmt.Errorf("%q: a unix socket is for serve.health only", addr)
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%q: the socket path must be absolute", addr)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", addr, err)
	}
	if health {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%q: the health endpoint is served on a loopback address or a unix socket only", addr)
		}
	}
	return nil
}

// serveFront is the assistant daemon's part of a running kernel: the
// router, its channels and the HTTP listeners.
type serveFront struct {
	d        *serve.Daemon
	log      *slog.Logger
	grace    time.Duration
	listen   string
	health   string
	servers  []*http.Server
	stopOnce sync.Once
}

// startServe starts the assistant daemon over k's sessions: the router,
// the channels under supervision, the serve.listen HTTP server (the HTTP
// channels) and the serve.health endpoints. A listener that cannot be
// opened stops the start.
func startServe(ctx context.Context, u *userenv.Env, k *Kernel, log *slog.Logger) (*serveFront, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	c := &l.Config
	ws, chans, err := servePreflight(u, c, log)
	if err != nil {
		return nil, err
	}
	reports := map[string]channel.Conversation{}
	for _, h := range c.Serve.Webhooks {
		if h.Report.Channel != "" {
			reports[h.Name] = channel.Conversation{Channel: h.Report.Channel, Room: h.Report.Room}
		}
	}
	var route []channel.Conversation
	for _, r := range c.Approval.Route {
		route = append(route, channel.Conversation{Channel: r.Channel, Room: r.Room})
	}
	dm, err := serve.New(serve.Options{Sessions: k.sessions, Approvals: k.broker, Audit: auditOnDemand{u: u, held: &k.held}, DB: k.db,
		Workspace: ws, Model: c.Model, ApprovalRoute: route, Approvers: c.Approval.Approvers, Reports: reports,
		Logger: log.With("subsystem", "serve")})
	if err != nil {
		return nil, err
	}
	f := &serveFront{d: dm, log: log, grace: c.Serve.Grace.Std(), listen: c.Serve.Listen, health: c.Serve.Health}
	if err := dm.Start(ctx, chans); err != nil {
		return nil, err
	}
	if c.Serve.Listen != "" {
		mux := http.NewServeMux()
		dm.Mount(mux)
		if err := f.serveHTTP(c.Serve.Listen, mux); err != nil {
			f.stop()
			return nil, fmt.Errorf("serve.listen: %w", err)
		}
	}
	if c.Serve.Health != "" {
		if err := f.serveHTTP(c.Serve.Health, dm.HealthHandler()); err != nil {
			f.stop()
			return nil, fmt.Errorf("serve.health: %w", err)
		}
	}
	log.Info("assistant daemon serving", "workspace", ws, "channels", len(chans), "listen", c.Serve.Listen, "health", c.Serve.Health)
	return f, nil
}

// servePreflight is what "fluffy serve" needs before it starts anything:
// the assistant workspace, a model, and something to serve (a channel or
// the health endpoint); ErrNothingToServe says what is missing and how to
// start. It returns the workspace and the configured channels.
func servePreflight(u *userenv.Env, c *config.Config, log *slog.Logger) (string, []channel.Channel, error) {
	ws, err := assistantWorkspace(u, c)
	if err != nil {
		return "", nil, err
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return "", nil, fmt.Errorf("%w: the assistant workspace %s does not exist; create it with 'fluffy serve init' (or set serve.workspace)", ErrNothingToServe, ws)
	}
	if c.Model == "" {
		return "", nil, fmt.Errorf("%w: no model is configured; set model: provider/name (fluffy models lists them)", ErrNothingToServe)
	}
	d, err := u.DataDir()
	if err != nil {
		return "", nil, err
	}
	chans, err := serveChannels(c, channelDeps{log: log, state: d.Path("serve"), now: time.Now})
	if err != nil {
		return "", nil, err
	}
	if len(chans) == 0 && c.Serve.Health == "" {
		return "", nil, fmt.Errorf("%w: no channel (serve.webhooks, serve.email, serve.cron) and no health endpoint (serve.health) is configured; 'fluffy serve init' prints a commented serve: section to start from", ErrNothingToServe)
	}
	return ws, chans, nil
}

// serveHTTP serves h on addr (host:port, or unix:/path: a stale socket
// file is replaced, the new one is 0600).
func (f *serveFront) serveHTTP(addr string, h http.Handler) error {
	var ln net.Listener
	var err error
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, serr := os.Lstat(p); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p)
		}
		if ln, err = net.Listen("unix", p); err == nil {
			err = os.Chmod(p, 0o600)
		}
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(f.log.Handler(), slog.LevelWarn)}
	f.servers = append(f.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.log.Error("http server", "addr", addr, "err", err)
		}
	}()
	f.log.Info("http serving", "addr", ln.Addr().String())
	return nil
}

// status is the daemon's part of "fluffy status".
func (f *serveFront) status(ctx context.Context) *kernel.ServeStatus {
	st := f.d.Status(ctx)
	st.Listen, st.Health = f.listen, f.health
	return &st
}

// stop stops the channels and the HTTP servers, gives the turns in
// progress serve.grace to end, then cancels them (their sessions stay
// resumable). It is idempotent.
func (f *serveFront) stop() {
	f.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.grace)
		defer cancel()
		f.log.Info("assistant daemon stopping", "grace", f.grace)
		for _, s := range f.servers {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Shutdown(sctx)
			scancel()
		}
		f.d.Stop(ctx)
	})
}
