package wiring

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/cron"
	"github.com/fluffy-agent/fluffy/internal/channel/email"
	"github.com/fluffy-agent/fluffy/internal/channel/matrix"
	"github.com/fluffy-agent/fluffy/internal/channel/terminal"
	"github.com/fluffy-agent/fluffy/internal/channel/webhook"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/serve"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/web"
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
	// home is the person's home directory (serve.workspace's "~").
	home string
	// env resolves a webhook's env: secret.
	env func(string) (string, bool)
	// resolve resolves a webhook's secret of another backend (age,
	// bitwarden); nil refuses them.
	resolve webhook.Resolver
	// ws is the assistant workspace (mail attachments go there).
	ws string
	// data is the data directory (a Matrix account's state goes under
	// data/matrix/<name>).
	data string
}

// serveChannels builds the channels the serve: section configures, in a
// stable order: the terminal (always), the webhooks (serve.webhooks),
// the mail channel (serve.email), the Matrix accounts (serve.matrix),
// then the schedule (serve.cron and the
// heartbeat). Each channel package's constructor is
// called here, and only here; channelChecks runs their configuration
// checks. A webhook whose nonce store is corrupt is a retryHook: it
// fails under supervision rather than stopping the daemon. On error, the
// channels built so far are closed.
func serveChannels(l *config.Loaded, d channelDeps) (chans []channel.Channel, err error) {
	c := &l.Config
	defer func() {
		if err != nil {
			closeChannels(chans)
			chans = nil
		}
	}()
	// The person's own terminal ("fluffy ask"): the kernel socket
	// admits only the daemon's user, so it needs no configuration.
	chans = append(chans, terminal.New())
	for _, h := range c.Serve.Webhooks {
		dir := ""
		if d.state != "" {
			dir = filepath.Join(d.state, "hooks", h.Name)
		}
		opts := webhook.Options{Logger: d.log.With("channel", h.Name), StateDir: dir, Now: d.now, LookupEnv: d.env, Resolve: d.resolve}
		hook, err := webhook.New(h, opts)
		if errors.Is(err, webhook.ErrCorruptNonceStore) {
			// The hook's state, not the configuration, is at fault: the
			// daemon starts, this channel fails until the file is repaired.
			d.log.Error("webhook cannot start; retried under supervision", "channel", h.Name, "err", err)
			chans = append(chans, &retryHook{name: h.Name, open: func() (*webhook.Hook, error) { return webhook.New(h, opts) }})
			continue
		}
		if err != nil {
			return chans, fmt.Errorf("serve.webhooks %q: %w", h.Name, err)
		}
		chans = append(chans, hook)
	}
	if e := c.Serve.Email; e.Listen != "" {
		dir := ""
		if d.ws != "" {
			// In the assistant workspace, where the agent's file tools
			// read them: mail/attachments/<message>/.
			dir = filepath.Join(d.ws, "mail")
		}
		mail, err := email.New(e, email.Options{Logger: d.log.With("channel", email.Name), StateDir: dir, Clock: d.now})
		if err != nil {
			return chans, err
		}
		chans = append(chans, mail)
	}
	mx, err := matrixChannels(c.Serve.Matrix, d)
	chans = append(chans, mx...)
	if err != nil {
		return chans, err
	}
	if cc := cron.ConfigFrom(l, d.home); wantCron(cc) {
		dir := ""
		if d.state != "" {
			dir = filepath.Join(d.state, cron.Name)
		}
		cr, err := cron.New(cc, cron.Options{Logger: d.log.With("channel", cron.Name), StateDir: dir, Now: d.now})
		if err != nil {
			return chans, err
		}
		chans = append(chans, cr)
	}
	return chans, nil
}

// wantCron reports whether the schedule channel has work: a job, or a
// heartbeat with somewhere to report (a heartbeat reporting to no one
// would spend model calls on answers nobody reads).
func wantCron(cc cron.Config) bool {
	return len(cc.Jobs) > 0 || cc.Heartbeat > 0 && cc.HeartbeatReport.Channel != ""
}

// closeChannels releases what channels hold outside their Run (a
// webhook's nonce store).
func closeChannels(chans []channel.Channel) {
	for _, c := range chans {
		if cl, ok := c.(interface{ Close() error }); ok {
			_ = cl.Close()
		}
	}
}

// channelChecks are the channel packages' configuration checks (their
// Check functions), for "fluffy serve --check".
func channelChecks(l *config.Loaded, home string, env func(string) (string, bool)) []error {
	errs := webhook.Check(l.Config.Serve.Webhooks, l.Origins["serve.webhooks"], env)
	if l.Config.Serve.Email.Listen != "" {
		errs = append(errs, email.Check(l.Config.Serve.Email, l.Origins)...)
	}
	errs = append(errs, matrix.Check(l.Config.Serve.Matrix, l.Origins["serve.matrix"], env)...)
	if cc := cron.ConfigFrom(l, home); wantCron(cc) || len(cc.Jobs) > 0 {
		errs = append(errs, cron.Check(cc)...)
	}
	return errs
}

// servePrompts is what the person configured each event channel's
// sessions to do with what arrives (a hook's or the mail channel's
// prompt): the person's own words, put before the untrusted content.
func servePrompts(c *config.Config) map[string]string {
	p := map[string]string{}
	for _, h := range c.Serve.Webhooks {
		if h.Prompt != "" {
			p[h.Name] = h.Prompt
		}
	}
	if c.Serve.Email.Prompt != "" {
		p[email.Name] = c.Serve.Email.Prompt
	}
	return p
}

// cronLimits is each scheduled job's budget (serve.cron max_turns and
// max_cost) for the turns of its conversation.
func cronLimits(jobs []config.CronJob) func(channel.Conversation) kernel.RunLimits {
	by := map[string]kernel.RunLimits{}
	for _, j := range jobs {
		by[j.Name] = kernel.RunLimits{MaxTurns: j.MaxTurns, MaxCost: j.MaxCost}
	}
	return func(conv channel.Conversation) kernel.RunLimits {
		if conv.Channel != cron.Name {
			return kernel.RunLimits{}
		}
		return by[conv.Room]
	}
}

// serveReports is where each conversation that cannot be answered on its
// own channel reports: a webhook's report route by the hook's name, a
// cron job's by "cron/JOB", the heartbeat's by "cron/heartbeat".
func serveReports(c *config.Config) map[string]channel.Conversation {
	reports := map[string]channel.Conversation{}
	add := func(key string, r config.Route) {
		if r.Channel != "" {
			reports[key] = channel.Conversation{Channel: r.Channel, Room: r.Room}
		}
	}
	for _, h := range c.Serve.Webhooks {
		add(h.Name, h.Report)
	}
	add(email.Name, c.Serve.Email.Report)
	for _, j := range c.Serve.Cron {
		add(cron.Name+"/"+j.Name, j.Report)
	}
	add(cron.Name+"/"+cron.HeartbeatJob, c.Serve.HeartbeatReport)
	return reports
}

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
	chans, err := servePreflight(u, l)
	if err != nil {
		errs = append(errs, err)
	}
	for _, a := range []struct{ key, addr string }{{"serve.health", c.Serve.Health}, {"serve.listen", c.Serve.Listen}} {
		if a.addr == "" {
			continue
		}
		if err := checkAddr(a.addr, a.key == "serve.health", c.Serve.HealthExposed); err != nil {
			errs = append(errs, located(l, a.key, fmt.Errorf("%s: %w", a.key, err)))
		}
	}
	if c.Serve.Web.Listen != "" {
		if err := checkWebListen(c.Serve.Web); err != nil {
			errs = append(errs, located(l, "serve.web.listen", fmt.Errorf("serve.web.listen: %w", err)))
		}
	}
	home, _ := u.Getenv("HOME")
	errs = append(errs, channelChecks(l, home, u.Getenv)...)
	names := map[string]bool{}
	for _, n := range chans {
		names[n] = true
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

// checkAddr checks a host:port or, for the health endpoint, unix:/path;
// the health endpoint's host:port must be loopback unless exposed.
func checkAddr(addr string, health, exposed bool) error {
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
	if health && !exposed {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%q: the health endpoint is served on a loopback address or a unix socket only (serve.health_exposed: true serves it elsewhere)", addr)
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
	web      string
	servers  []*http.Server
	chans    []channel.Channel
	mem      *heldMemory
	stopOnce sync.Once
}

// startServe starts the assistant daemon over k's sessions: the router,
// the channels under supervision, the serve.listen HTTP server (the HTTP
// channels) and the serve.health endpoints. A listener that cannot be
// opened stops the start.
func startServe(ctx context.Context, u *userenv.Env, k *Kernel, mux *ipc.Mux, hub *web.Hub, log *slog.Logger) (*serveFront, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	c := &l.Config
	ws, err := assistantWorkspace(u, c)
	if err != nil {
		return nil, err
	}
	if _, err := servePreflight(u, l); err != nil {
		return nil, err
	}
	if c.Serve.Health != "" {
		// As --check says it: /readyz and /metrics go to the address
		// named, so one off loopback must be meant.
		if err := checkAddr(c.Serve.Health, true, c.Serve.HealthExposed); err != nil {
			return nil, fmt.Errorf("serve.health: %w", err)
		}
	}
	if err := ownProject(ws); err != nil {
		return nil, err
	}
	// The daemon holds the memory index: sessions search it rather
	// than scan the files at each search. Without it they still can.
	if err := k.mem.open(ctx, u, ws, log.With("subsystem", "memory")); err != nil {
		log.Warn("memory index: not held; each search opens it", "err", err)
	}
	served := false
	defer func() {
		if !served {
			k.mem.close()
		}
	}()
	d, err := u.DataDir()
	if err != nil {
		return nil, err
	}
	home, _ := u.Getenv("HOME")
	chans, err := serveChannels(l, channelDeps{log: log, state: d.Path("serve"), now: time.Now, home: home, env: u.Getenv, ws: ws, data: d.Root, resolve: channelSecrets(u)})
	if err != nil {
		return nil, err
	}
	for _, ch := range chans {
		if r, ok := ch.(interface{ Register(*ipc.Mux) error }); ok {
			if err := r.Register(mux); err != nil {
				closeChannels(chans)
				return nil, err
			}
		}
	}
	if err := registerMatrix(mux, chans); err != nil {
		closeChannels(chans)
		return nil, err
	}
	var console *web.Server
	if c.Serve.Web.Listen != "" && hub != nil {
		var closeWeb func()
		if console, closeWeb, err = startWeb(ctx, u, k, hub, mux, l, ws, log); err != nil {
			closeChannels(chans)
			return nil, err
		}
		// The console is the "web" channel too: sessions started from
		// the page are its conversations.
		chans = append(chans, closer{console, closeWeb})
	}
	reports := serveReports(c)
	var route []channel.Conversation
	for _, r := range c.Approval.Route {
		route = append(route, channel.Conversation{Channel: r.Channel, Room: r.Room})
	}
	dm, err := serve.New(serve.Options{Sessions: k.sessions, Approvals: k.broker, Audit: auditOnDemand{u: u, held: &k.held}, DB: k.db,
		Workspace: ws, Model: c.Model, ApprovalRoute: route, Approvers: c.Approval.Approvers, Reports: reports,
		Limits:  cronLimits(c.Serve.Cron),
		Admit:   admitTurn(k.sched),
		Prompts: servePrompts(c),
		Tracer:  k.tracer,
		Metrics: k.metrics,
		// Counted for the OTLP export without telemetry.prometheus:
		// then /metrics stays 404.
		NoMetricsEndpoint: !c.Telemetry.Prometheus,
		Quiet: func(conv channel.Conversation, text string) bool {
			return conv.Channel == cron.Name && cron.IsNothingToReport(text)
		},
		Logger: log.With("subsystem", "serve")})
	if err != nil {
		closeChannels(chans)
		return nil, err
	}
	f := &serveFront{d: dm, log: log, grace: c.Serve.Grace.Std(), listen: c.Serve.Listen, health: c.Serve.Health, chans: chans, mem: &k.mem}
	if err := dm.Start(ctx, chans); err != nil {
		closeChannels(chans)
		return nil, err
	}
	if c.Serve.Listen != "" {
		hmux := http.NewServeMux()
		dm.Mount(hmux)
		bound, err := f.serveHTTP(c.Serve.Listen, hmux)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("serve.listen: %w", err)
		}
		f.listen = bound
	}
	if console != nil {
		tlsCfg, err := webTLS(c.Serve.Web)
		if err != nil {
			f.stop()
			return nil, err
		}
		bound, err := f.serveHTTPTLS(c.Serve.Web.Listen, console, tlsCfg)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("serve.web.listen: %w", err)
		}
		console.SetAddr(bound)
		f.web = "http://" + bound + "/"
		if tlsCfg != nil {
			f.web = "https://" + bound + "/"
		}
	}
	if c.Serve.Health != "" {
		bound, err := f.serveHTTP(c.Serve.Health, dm.HealthHandler())
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("serve.health: %w", err)
		}
		f.health = bound
	}
	log.Info("assistant daemon serving", "workspace", ws, "channels", len(chans), "listen", f.listen, "health", f.health, "web", f.web)
	served = true
	return f, nil
}

// ownProject makes the assistant workspace a project root of its own (a
// .fluffy directory in it). Project discovery walks up to the nearest
// .fluffy or .git: without its own, the default workspace
// ~/.fluffy/workspace would belong to the home directory's "project",
// whose .fluffy is fluffy's own files, and every session on it would be
// refused as running inside them.
func ownProject(ws string) error {
	if err := os.Mkdir(filepath.Join(ws, ".fluffy"), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("the assistant workspace %s: %w", ws, err)
	}
	return nil
}

// servePreflight is what "fluffy serve" needs before it starts anything:
// the assistant workspace and a model; ErrNothingToServe says what is
// missing and how to start. It returns the names of the channels the configuration asks
// for (none is built: "fluffy serve --check" runs it beside a daemon
// that holds their state).
func servePreflight(u *userenv.Env, l *config.Loaded) ([]string, error) {
	c := &l.Config
	ws, err := assistantWorkspace(u, c)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: the assistant workspace %s does not exist; create it with 'fluffy serve init' (or set serve.workspace)", ErrNothingToServe, ws)
	}
	if c.Model == "" {
		return nil, fmt.Errorf("%w: no model is configured; set model: provider/name (fluffy models lists them)", ErrNothingToServe)
	}
	// The terminal is always served: with a workspace and a model,
	// "fluffy ask" reaches the assistant before any other channel is
	// configured.
	names := []string{terminal.Name}
	for _, h := range c.Serve.Webhooks {
		names = append(names, h.Name)
	}
	if c.Serve.Email.Listen != "" {
		names = append(names, email.Name)
	}
	if c.Serve.Web.Listen != "" {
		names = append(names, web.Name)
	}
	for _, m := range c.Serve.Matrix {
		names = append(names, matrix.ChannelName(m))
	}
	home, _ := u.Getenv("HOME")
	if wantCron(cron.ConfigFrom(l, home)) {
		names = append(names, cron.Name)
	}
	return names, nil
}

// serveHTTP serves h on addr (host:port, or unix:/path: a stale socket
// file is replaced, the new one is 0600) and returns the address it is
// bound to, in addr's notation: port 0 becomes the port the system chose,
// which status and the log then show.
func (f *serveFront) serveHTTP(addr string, h http.Handler) (string, error) {
	return f.serveHTTPTLS(addr, h, nil)
}

// serveHTTPTLS is serveHTTP, over TLS with cfg when it is not nil.
func (f *serveFront) serveHTTPTLS(addr string, h http.Handler, cfg *tls.Config) (string, error) {
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
		return "", err
	}
	bound := addr
	if ln.Addr().Network() == "tcp" {
		bound = ln.Addr().String()
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	// Slow or huge requests are the server's to bound, before any handler.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(f.log.Handler(), slog.LevelWarn)}
	f.servers = append(f.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.log.Error("http server", "addr", addr, "err", err)
		}
	}()
	f.log.Info("http serving", "addr", bound)
	return bound, nil
}

// status is the daemon's part of "fluffy status".
func (f *serveFront) status(ctx context.Context) *kernel.ServeStatus {
	st := f.d.Status(ctx)
	st.Listen, st.Health, st.Web = f.listen, f.health, f.web
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
		closeChannels(f.chans)
		if f.mem != nil {
			f.mem.close()
		}
	})
}

// channelSecrets resolves channels' secret references of the backends
// beyond env and file (a hook's key in the age store or a vault) through
// the configured backends. The daemon has no terminal: a backend that
// needs a password reads it from its configured file or stays locked.
func channelSecrets(u *userenv.Env) webhook.Resolver {
	return func(ctx context.Context, ref secret.Ref) ([]byte, error) {
		bs, err := u.SecretBackends(nil)
		if err != nil {
			return nil, err
		}
		b, ok := bs[ref.Backend]
		if !ok {
			return nil, fmt.Errorf("%w: %s", secret.ErrUnknownBackend, ref)
		}
		return b.Lookup(ctx, ref.Path)
	}
}
